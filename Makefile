# Every target installs what it needs first. On a machine without torch, the pinned CPU build is
# installed (any other version would pull a multi-GB CUDA build); an existing torch is kept.
PYTHON ?= python
TORCH_CPU ?= 2.13.0
# one stamp per Python environment (by its sys.prefix): another venv gets its own install
STAMP := .make/installed-$(shell $(PYTHON) -c \
	"import hashlib, sys; print(hashlib.sha256(sys.prefix.encode()).hexdigest()[:12])")
export HF_HUB_OFFLINE = 1
export HF_DATASETS_OFFLINE = 1

TABLE ?= tree_transduction
BUDGET ?= cpu
SEEDS ?= 3
# pytest-xdist workers of the test targets, one per core of the CI machine (0: no workers)
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist worksteal

# The lowest versions pyproject.toml declares for the CLI's two libraries (checked by CI).
LIGHTNING_LOW ?= 2.5.5
JSONARGPARSE_LOW ?= 4.44.0
LOW_VENV := .make/lower-bounds

WHEEL_VENV := .make/wheel-venv
# `$(CHILD_VENV) DIR REQS...`: a fresh venv that sees this environment's packages after its own
# (our torch and test tools, also from inside a venv), then `pip install REQS` there with torch
# pinned to ours, so that no other torch is downloaded
CHILD_VENV := $(PYTHON) .ci/child_venv.py

.PHONY: install demo reproduce reports test test-lower-bounds test-wheel bench gpu-check lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -c "import torch" 2>/dev/null || $(PYTHON) -m pip install "torch==$(TORCH_CPU)"
	$(PYTHON) -m pip install -e ".[dev,bench,translation,transformers]"
	mkdir -p $(dir $@) && touch $@

install: $(STAMP)

# The demo takes ~4 min on 2 idle cores, longer on a busy machine (it says so when it starts);
# `OMP_NUM_THREADS=1 make demo` gives each run one thread (README, "On a busy machine").
demo: install  ## the main job: simple vs structured attention on tree transduction (~4 min)
	$(PYTHON) -m lit_structattn.cli reproduce tree_transduction --budget demo --seeds 1 \
		--rows simple structured --root runs/demo
	@echo "TensorBoard logs (attention figures, parses): tensorboard --logdir runs/demo"

reproduce: install  ## maintainers: TABLE=... BUDGET=... SEEDS=...; updates reports/ and its ledger
	$(PYTHON) -m lit_structattn.cli reproduce $(TABLE) --budget $(BUDGET) --seeds $(SEEDS) \
		--ledger --reports $(CURDIR)/reports
	$(MAKE) reports

# A verdict that changes while its ledger does not is refused; ACCEPT_VERDICTS=1 accepts it.
reports: install  ## maintainers: rewrite every report of reports/ from its ledger alone
	$(PYTHON) -c "from pathlib import Path; from lit_structattn.reproduce.ledger import \
		write_ledger_reports; write_ledger_reports(Path('$(CURDIR)/reports/results'), \
		Path('$(CURDIR)/reports'), accept_verdict_changes='$(ACCEPT_VERDICTS)' not in ('', '0'))"

test: install  ## the test suite, in TEST_WORKERS processes
	$(PYTHON) -m pytest $(XDIST)

test-lower-bounds: install  ## the CLI tests with the lowest lightning and jsonargparse declared
	$(CHILD_VENV) $(LOW_VENV) "lightning==$(LIGHTNING_LOW)" \
		"jsonargparse[signatures]==$(JSONARGPARSE_LOW)"
	PYTHONPATH=$(CURDIR) $(LOW_VENV)/bin/python -m pytest $(XDIST) -q -m "not slow" \
		tests/test_cli.py tests/test_task_choices.py tests/test_golden.py tests/test_callbacks.py

test-wheel: install  ## the built wheel in a fresh venv, run from an empty folder: a table, predict
	rm -rf .make/dist
	$(PYTHON) -m pip wheel --quiet --no-deps -w .make/dist .
	$(CHILD_VENV) $(WHEEL_VENV) --no-deps .make/dist/lit_structattn-*.whl
	cd "$$(mktemp -d)" && PATH="$(abspath $(WHEEL_VENV))/bin:$$PATH" sh -ec '\
		python -c "import lit_structattn as p; assert \"wheel-venv\" in p.__file__, p.__file__"; \
		structattn experiments > experiments.txt; \
		grep -q "tree_transduction/structured" experiments.txt; \
		structattn reproduce tree_transduction --budget ci --seeds 1; \
		test -f runs/reproduce/tree_transduction.md; \
		printf "( + 1 2 )\n( * 3 ( + 4 5 ) 6 )\n" > formulas.txt; \
		structattn predict --input formulas.txt --output predictions.jsonl --ckpt_path \
			"$$(find runs -path "*ci/structured/*" -name last.ckpt)"; \
		test "$$(grep -c "\"prediction\"" predictions.jsonl)" -eq 2'

bench: install  ## speed against the peers; writes reports/bench_*.md
	$(PYTHON) -m bench.startup
	$(PYTHON) -m bench.transforms
	$(PYTHON) -m bench.structured
	$(PYTHON) -m bench.tree_transduction
	$(PYTHON) -m bench.easy_first
	$(PYTHON) -m bench.translation
	$(PYTHON) -m bench.transformer
	$(PYTHON) -m bench.joint_attention
	$(PYTHON) -m bench.nli
	$(PYTHON) -m bench.babi
	OMP_NUM_THREADS=1 $(PYTHON) -m bench.compile

gpu-check: install  ## on a GPU machine: the GPU check -> reports/bench_gpu.md (bench.gpu --quick: 8 min)
	$(PYTHON) -m bench.gpu

lint: install
	ruff check .

clean:
	rm -rf .make runs
