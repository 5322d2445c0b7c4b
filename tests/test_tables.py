"""The paper tables of ``configs/tables/*.yaml``: every table loads with existing configs, an
overlay becomes the CLI overrides the runner passes, shared rows are the same configuration,
and a bad table file is refused with a message naming the file and the problem."""

from __future__ import annotations

import pytest
import yaml

from lit_structattn.reproduce.tables import (
    BUDGETS,
    CONFIGS,
    TABLE_FILES,
    TABLES,
    Comparison,
    GroupComparison,
    TableFileError,
    Untestable,
    Value,
    load_tables,
    overlay_arguments,
)

NAMES = {"joint_attention_morph", "sparse_constrained_nmt", "joint_attention_nmt",
         "segmentation_attention", "tree_transduction", "easy_first_pos", "easy_first_ner",
         "easy_first_ablation", "easy_first_qe", "babi_qa", "nli",
         "sparse_constrained_nmt_13_epochs", "segmentation_attention_12_epochs",
         "transformer_nmt", "sparse_attention_nli"}


def test_every_table_loads_from_its_family_file():
    assert set(TABLES) == NAMES
    assert load_tables() == TABLES
    assert {path.stem for path in TABLE_FILES.glob("*.yaml")} == {
        "morphology", "translation", "tree_transduction", "easy_first", "babi", "nli",
        "sparse_family"}
    for table in TABLES.values():
        assert {"ci", "cpu"} <= set(table.budgets) <= set(BUDGETS), table.name
        of_a_paper = any(row.paper for row in table.rows) or bool(table.claims)
        assert of_a_paper == ("paper" in table.budgets), table.name  # the paper's own set-up
        assert table.rows and table.metrics and table.note, table.name
        metrics = {key for key, _ in table.metrics}
        assert all(set(row.paper) <= metrics for row in table.rows), table.name


def test_every_path_exists():
    for table in TABLES.values():
        for row in table.rows:
            assert row.configs, (table.name, row.name)
            for config in row.configs:
                assert config.is_file() and CONFIGS in config.parents, (table.name, row.name)


def test_rows_read_from_yaml():
    """Anchors, merged budgets, notes joined from parts and the bAbI task overlays."""
    babi = TABLES["babi_qa"]
    assert len(babi.rows) == 36 and babi.select_by == "val/accuracy"
    assert babi.rows[0].name == "task 02, MemN2N" and babi.rows[0].group == "MemN2N"
    assert babi.rows[-1].overrides == ("--data.init_args.task", "19")
    assert babi.rows[-1].paper == {"test/accuracy": 24.3, "test/fact_accuracy": 7.8}
    joint = TABLES["joint_attention_nmt"]
    assert joint.budgets["ci"] == TABLES["sparse_constrained_nmt"].budgets["ci"]
    assert joint.budgets["cpu"][0] == ("--data.init_args.bpe_size", "2000")
    assert list(joint.budgets) == ["ci", "cpu", "paper"]
    greedy = next(row for row in joint.rows if row.name == "soft, greedy")
    assert greedy.overrides == ("--model.init_args.test_beam", "1") and greedy.test_of == "soft"
    assert "fetched here). Shankar et al.: IWSLT" in joint.note  # parts joined with one space
    assert TABLES["segmentation_attention"].scale == 1.0 and TABLES["nli"].scale == 100.0


def test_overlay_becomes_cli_overrides_in_document_order():
    overlay = {"trainer": {"max_epochs": 13, "fast_dev_run": False},
               "model": {"init_args": {"init_std": 0.01, "vectors": None, "name": "full"}},
               "seed_everything": 3}
    assert overlay_arguments(overlay) == (
        "--trainer.max_epochs", "13", "--trainer.fast_dev_run", "false",
        "--model.init_args.init_std", "0.01", "--model.init_args.vectors", "null",
        "--model.init_args.name", "full", "--seed_everything", "3")
    assert overlay_arguments(yaml.safe_load("data: {init_args: {protocol: full}}")) == (
        "--data.init_args.protocol", "full")
    assert overlay_arguments({}) == ()
    with pytest.raises(TableFileError, match="trainer.devices is a list"):
        overlay_arguments({"trainer": {"devices": [0, 1]}})


def test_shared_rows_are_the_same_configuration():
    shared = [(table, row) for table in TABLES.values() for row in table.rows if row.same_run_as]
    assert shared
    for table, row in shared:
        other_table = TABLES[row.same_run_as[0]]
        other = next(r for r in other_table.rows if r.name == row.same_run_as[1])
        assert (row.configs, row.overrides, row.test_of) == (
            other.configs, other.overrides, other.test_of)
        assert ({b: o for b, (o, _) in table.budgets.items()}
                == {b: o for b, (o, _) in other_table.budgets.items()})


def valid_table() -> dict:
    """A table that loads: two rows of the tree transduction configs, the second testing the
    first."""
    configs = ["tree_transduction/base.yaml", "tree_transduction/simple.yaml"]
    return {
        "title": "T", "note": ["first part.", "second part."],
        "metrics": [{"key": "test/ltf_d2", "label": "depth 2"}],
        "budgets": {"ci": {"describe": "smoke", "overlay": {"trainer": {"max_epochs": 1}}},
                    "cpu": {"describe": "as committed"}},
        "rows": [{"name": "a", "configs": configs, "paper": {"test/ltf_d2": 50}},
                 {"name": "b", "configs": configs, "test_of": "a",
                  "overlay": {"model": {"init_args": {"test_beam": 1}}}}],
    }


def write(folder, name: str, tables: dict) -> None:
    (folder / name).write_text(yaml.safe_dump({"tables": tables}, sort_keys=False))


def test_valid_table_file_loads(tmp_path):
    write(tmp_path, "mine.yaml", {"mine": valid_table()})
    (table,) = load_tables(tmp_path).values()
    assert table.note == "first part. second part." and table.scale == 100.0
    assert table.rows[0].paper == {"test/ltf_d2": 50.0}
    assert table.rows[1].overrides == ("--model.init_args.test_beam", "1")
    assert table.budgets == {"ci": (("--trainer.max_epochs", "1"), "smoke"),
                             "cpu": ((), "as committed")}


def _set(path: tuple, value):
    """A change of ``valid_table()``: the entry at ``path`` set to ``value``."""
    def change(spec: dict) -> None:
        *parents, last = path
        for key in parents:
            spec = spec[key]
        spec[last] = value
    return change


def _drop(path: tuple):
    def change(spec: dict) -> None:
        *parents, last = path
        for key in parents:
            spec = spec[key]
        del spec[last]
    return change


def _claims(*changes: dict):
    """A change of ``valid_table()``: its claims, each a valid comparison with ``changes``."""
    comparison = {"name": "x", "compare": ["a", "b"], "metric": "test/ltf_d2",
                  "direction": "higher"}
    return _set(("claims",), [{**comparison, **change} for change in changes])


@pytest.mark.parametrize("change, message", [
    (_set(("titel",), "T"), "table 'mine': unknown key(s) 'titel'; valid keys: budgets, "
                            "claims, metrics, note, printed_averages, rows, scale, seeds, "
                            "select_by, select_top, title"),
    (_set(("rows", 0, "overlays"), {}), "table 'mine', row 'a': unknown key(s) 'overlays'; "
                                        "valid keys: configs, group, name, overlay, paper"),
    (_drop(("title",)), "table 'mine': missing key(s) 'title'"),
    (_set(("select_top",), {"test/ltf_d2": 10}), "table 'mine', select_top: needs select_by"),
    (lambda spec: spec.update(select_by="val/score", select_top={"test/nope": 2}),
     "table 'mine', select_top: 'test/nope' is not a metric of the table"),
    (lambda spec: spec.update(select_by="val/score", select_top={"test/ltf_d2": 0}),
     "table 'mine', select_top, test/ltf_d2: expected N >= 1, got 0"),
    (_drop(("rows", 1, "configs")), "table 'mine', row 'b': missing key(s) 'configs'"),
    (_drop(("rows", 1, "name")), "table 'mine', row 2: missing key(s) 'name'"),
    (_set(("budgets", "ci", "describ"), "x"), "table 'mine', budgets, ci: unknown key(s) "
                                              "'describ'; valid keys: describe, overlay"),
    (_set(("rows", 0, "configs", 1), "tree_transduction/nowhere.yaml"),
     "table 'mine', row 'a', configs: config 'tree_transduction/nowhere.yaml' does not exist"),
    (_set(("budgets", "gpu"), {"describe": "x"}),
     "table 'mine', budgets: unknown budget 'gpu'; budgets: ci, demo, cpu, paper"),
    (_set(("rows", 1, "test_of"), "c"),
     "table 'mine', row 'b': test_of 'c' names no row of the table; rows: a, b"),
    (_set(("rows", 1, "name"), "a"), "table 'mine': two rows are named 'a'"),
    (_set(("rows", 0, "same_run_as"), ["mine", "z"]),
     "table 'mine', row 'a': same_run_as ['mine', 'z'] names no row of the tables (mine)"),
    (_set(("rows", 0, "same_run_as"), "mine"),
     "table 'mine', row 'a', same_run_as: expected tuple[str, str] | None, got 'mine'"),
    (_set(("rows", 0, "paper"), {"test/bleu": 30.0}),
     "table 'mine', row 'a': paper numbers for ['test/bleu'], which are not metrics"),
    (_set(("rows", 0, "overlay"), {"trainer": {"devices": [0, 1]}}),
     "table 'mine', row 'a', overlay: trainer.devices is a list"),
    (_claims({"compare": ["a", "c"]}),
     "table 'mine', claim 'x', compare: 'c' names no row of the table; rows: a, b"),
    (_claims({"compare": ["a", "a"]}),
     "table 'mine', claim 'x', compare: a row compared with itself ('a')"),
    (_claims({"compare": ["a"]}), "table 'mine', claim 'x', compare: expected tuple[str, str]"),
    (_claims({"metric": "test/ltf_d9"}),
     "table 'mine', claim 'x', metric: 'test/ltf_d9' is not a metric of the table; metrics: "
     "test/ltf_d2"),
    (_claims({"direction": "up"}),
     "table 'mine', claim 'x', direction: expected one of higher, lower, got 'up'"),
    (_claims({"direction": None}),
     "table 'mine', claim 'x', direction: expected one of higher, lower, got None"),
    (_claims({"paper_gap": -3}),
     "table 'mine', claim 'x', direction: the paper's gap A - B is -3, which is not higher"),
    (_claims({"tolerance": 1.0}), "table 'mine', claim 'x', tolerance: not a key of a claim "
                                  "with compare"),
    (_claims({"row": "a"}), "table 'mine', claim 'x': give exactly one of compare, "
                            "compare_groups, row, untestable (given: compare, row)"),
    (_claims({"compare": None}), "table 'mine', claim 'x': give exactly one of compare, "
                                 "compare_groups, row, untestable"),
    (_claims({"compare": None, "compare_groups": ["a", "b"]}),
     "table 'mine', claim 'x', compare_groups: 'a' is no row group; groups: "),
    (_claims({"compare": None, "compare_groups": ["g", "g"]}),
     "table 'mine', claim 'x', compare_groups: a group compared with itself ('g')"),
    (_claims({"compare": None, "compare_groups": ["a"]}),
     "table 'mine', claim 'x', compare_groups: expected tuple[str, str]"),
    (_claims({"compare": None, "direction": None, "row": "b", "tolerance": 1.0}),
     "table 'mine', claim 'x', value: not given, and row 'b' has no paper number for "
     "test/ltf_d2"),
    (_claims({"compare": None, "direction": None, "row": "a"}),
     "table 'mine', claim 'x', tolerance: a value claim needs a tolerance >= 0"),
    (_claims({"compare": None, "direction": None, "untestable": "why"}),
     "table 'mine', claim 'x', metric: not a key of a claim with untestable"),
    (_claims({"evidence": "one sentence"}),
     "table 'mine', claim 'x', evidence: expected list[str], got 'one sentence'"),
    (_claims({"name": None}), "table 'mine', claim 1: missing key(s) 'name'"),
    (_claims({"sea": []}), "table 'mine', claim 'x': unknown key(s) 'sea'"),
    (_claims({}, {}), "table 'mine': two claims are named 'x'"),
    (_set(("rows",), {"name": "a"}),
     "table 'mine', rows: expected list[dict[str, Any]], got {'name': 'a'}"),
    (_set(("note",), ["part", 3]), "table 'mine', note: expected str | list[str], got ['part', 3]"),
    (_set(("seeds",), True), "table 'mine', seeds: expected int, got True"),
    (_set(("rows", 0, "paper"), {"test/ltf_d2": "high"}),
     "table 'mine', row 'a', paper: expected dict[str, float], got {'test/ltf_d2': 'high'}"),
    (_drop(("metrics", 0, "label")), "table 'mine', metrics: missing key(s) 'label'"),
    (_set(("title",), None), "table 'mine': missing key(s) 'title'"),
    (_set(("budgets", "ci", "overlay"), [1]),
     "table 'mine', budgets, ci, overlay: expected dict[str, Any], got [1]"),
])
def test_bad_table_file_is_refused_naming_file_and_problem(tmp_path, change, message):
    spec = valid_table()
    change(spec)
    write(tmp_path, "mine.yaml", {"mine": spec})
    with pytest.raises(TableFileError) as error:
        load_tables(tmp_path)
    assert str(error.value).startswith(str(tmp_path / "mine.yaml") + ": ")
    assert message in str(error.value)


def test_strings_are_read_as_written(tmp_path):
    """jsonargparse reads some strings as YAML, as on a command line; a table file's strings are
    kept as the file wrote them."""
    spec = valid_table()
    spec.update(title="T: a title", note="[not, a list]", select_by="null")
    spec["rows"][0].update(name="a: b", group="null")
    spec["rows"][1].update(test_of="a: b", overlay={"ckpt_path": "x: y", "model": {"lr": "1e-3"}})
    write(tmp_path, "mine.yaml", {"mine": spec})
    (table,) = load_tables(tmp_path).values()
    assert (table.title, table.note, table.select_by) == ("T: a title", "[not, a list]", "null")
    assert (table.rows[0].name, table.rows[0].group, table.rows[1].test_of) == (
        "a: b", "null", "a: b")
    assert table.rows[1].overrides == ("--ckpt_path", "x: y", "--model.lr", "1e-3")


def test_bad_file_level_is_refused(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("tables: {}\nshared: {}\nextra: 1\n")
    with pytest.raises(TableFileError, match=r"bad\.yaml: unknown key\(s\) 'extra'; valid keys: "
                                             "shared, tables"):
        load_tables(tmp_path)
    bad.write_text("tables: [unclosed\n")
    with pytest.raises(TableFileError, match=r"bad\.yaml: not valid YAML"):
        load_tables(tmp_path)
    bad.write_text("")
    with pytest.raises(TableFileError, match=r"bad\.yaml: expected a mapping, got None"):
        load_tables(tmp_path)


def test_a_table_defined_twice_is_refused(tmp_path):
    write(tmp_path, "a.yaml", {"mine": valid_table()})
    write(tmp_path, "b.yaml", {"mine": valid_table()})
    with pytest.raises(TableFileError, match=r"b\.yaml: table 'mine' is also defined in .*a\.yaml"):
        load_tables(tmp_path)


def test_anchors_and_merged_budgets(tmp_path):
    (tmp_path / "anchors.yaml").write_text("""
shared:
  note: &note Shared part.
  budgets: &budgets
    ci: {describe: smoke, overlay: {trainer: {max_epochs: 1}}}
    cpu: {describe: as committed}
tables:
  mine:
    title: T
    note: [*note, Own part.]
    metrics: [{key: test/ltf_d2, label: depth 2}]
    budgets:
      <<: *budgets
      cpu: {describe: fewer epochs, overlay: {trainer: {max_epochs: 3}}}
    rows:
      - {name: a, configs: [tree_transduction/base.yaml]}
""")
    table = load_tables(tmp_path)["mine"]
    assert table.note == "Shared part. Own part."
    assert table.budgets == {"ci": (("--trainer.max_epochs", "1"), "smoke"),
                             "cpu": (("--trainer.max_epochs", "3"), "fewer epochs")}


def test_claims_read_from_yaml(tmp_path):
    """The three kinds of claim; a comparison's gap and a value default to the paper's numbers
    of its rows; ``see`` names a claim of another table."""
    spec = valid_table()
    spec["rows"][1]["paper"] = {"test/ltf_d2": 45.5}
    spec["claims"] = [
        {"name": "a above b", "compare": ["a", "b"], "metric": "test/ltf_d2",
         "direction": "higher", "source": "Table 2", "evidence": ["At: 3 epochs.", "null"]},
        {"name": "b below a", "compare": ["b", "a"], "metric": "test/ltf_d2",
         "direction": "lower", "paper_gap": -4.0, "see": [["other", "a above b"]]},
        {"name": "a near 50", "row": "a", "metric": "test/ltf_d2", "tolerance": 2},
        {"name": "b near 40", "row": "b", "metric": "test/ltf_d2", "value": 40, "tolerance": 0},
        {"name": "METEOR", "untestable": "no WordNet: here"},
    ]
    other = {**valid_table(), "claims": [spec["claims"][0]]}
    write(tmp_path, "mine.yaml", {"mine": spec, "other": other})
    claims = load_tables(tmp_path)["mine"].claims
    assert [c.name for c in claims] == ["a above b", "b below a", "a near 50", "b near 40",
                                        "METEOR"]
    assert claims[0].states == Comparison(("a", "b"), "test/ltf_d2", "higher", 4.5)
    assert (claims[0].source, claims[0].evidence) == ("Table 2", ("At: 3 epochs.", "null"))
    assert claims[1].states.paper_gap == -4.0 and claims[1].see == (("other", "a above b"),)
    assert claims[2].states == Value("a", "test/ltf_d2", 50.0, 2.0)
    assert claims[3].states == Value("b", "test/ltf_d2", 40.0, 0.0)
    assert claims[4].states == Untestable("no WordNet: here") and claims[4].source is None
    assert load_tables(tmp_path)["other"].claims[0].see == ()


def grouped_table(*groups: str, items: tuple[str, ...] = (), printed: dict | None = None
                  ) -> dict:
    """``valid_table()`` with one row per group in ``groups``, in order, each with the paper's
    number 10 times its position, none testing another. Row k is named "``items[k]``, group";
    by default its item is the count of its group's rows so far ("1, x", "1, y", "2, x")."""
    spec = valid_table()
    configs = spec["rows"][0]["configs"]
    items = items or tuple(str(groups[:k + 1].count(group)) for k, group in enumerate(groups))
    spec["rows"] = [{"name": f"{item}, {group}", "configs": configs, "group": group,
                     "paper": {"test/ltf_d2": 10.0 * k}}
                    for k, (item, group) in enumerate(zip(items, groups, strict=True), start=1)]
    if printed:
        spec["printed_averages"] = printed
    return spec


def test_group_claims_pair_the_rows_of_one_item(tmp_path):
    """A comparison of row groups pairs each row of A with B's row of the same item, in A's
    order; the paper's gap is that of its printed averages, else of its rows' numbers, else
    given or none."""
    spec = grouped_table("x", "y", "x", "y", "z", printed={"x": {"test/ltf_d2": 50.0},
                                                           "y": {"test/ltf_d2": 20.0}})
    claim = {"name": "x above y", "compare_groups": ["x", "y"], "metric": "test/ltf_d2",
             "direction": "higher"}
    spec["claims"] = [claim, {**claim, "name": "y below x", "compare_groups": ["y", "x"],
                              "direction": "lower"}]
    write(tmp_path, "mine.yaml", {"mine": spec})
    first, second = load_tables(tmp_path)["mine"].claims
    assert first.states == GroupComparison(("x", "y"), (("1, x", "1, y"), ("2, x", "2, y")),
                                           "test/ltf_d2", "higher", 30.0)
    assert second.states.pairs == (("1, y", "1, x"), ("2, y", "2, x"))
    assert second.states.paper_gap == -30.0
    del spec["printed_averages"]
    spec["claims"] = [{**claim, "name": "y above x", "compare_groups": ["y", "x"]}]
    write(tmp_path, "mine.yaml", {"mine": spec})
    assert load_tables(tmp_path)["mine"].claims[0].states.paper_gap == 10.0  # 30 - 20
    del spec["rows"][3]["paper"]
    write(tmp_path, "mine.yaml", {"mine": spec})
    assert load_tables(tmp_path)["mine"].claims[0].states.paper_gap is None


def test_group_claims_pair_by_item_not_by_order(tmp_path):
    """Groups that list their items in different orders still pair one item's rows; a group's
    name inside an item ("x-ray" in group x) stays part of the item."""
    spec = grouped_table("x", "x", "y", "y", items=("task 02", "x-ray", "x-ray", "task 02"))
    spec["claims"] = [{"name": "c", "compare_groups": ["x", "y"], "metric": "test/ltf_d2",
                       "direction": "lower"}]
    write(tmp_path, "mine.yaml", {"mine": spec})
    assert load_tables(tmp_path)["mine"].claims[0].states.pairs == (
        ("task 02, x", "task 02, y"), ("x-ray, x", "x-ray, y"))


def test_group_claims_pair_rows_named_group_first(tmp_path):
    """A row may name its group first ("x: task 02"): the item is the rest, as when it ends."""
    spec = grouped_table("x", "x", "y", "y", items=("task 02", "task 03", "task 03", "task 02"))
    for row in spec["rows"]:
        item = row["name"].removesuffix(f", {row['group']}")
        row["name"] = f"{row['group']}: {item}"
    spec["claims"] = [{"name": "c", "compare_groups": ["x", "y"], "metric": "test/ltf_d2",
                       "direction": "lower"}]
    write(tmp_path, "mine.yaml", {"mine": spec})
    assert load_tables(tmp_path)["mine"].claims[0].states.pairs == (
        ("x: task 02", "y: task 02"), ("x: task 03", "y: task 03"))


@pytest.mark.parametrize(("groups", "items", "message"), [
    (("x", "y", "x", "y", "z"), (), "compare_groups: the groups' rows are not the same items, "
     "once each (a row's item is its name less its group's): 'x': '1', '2'; 'z': '1'"),
    (("x", "y", "x", "y"), ("1", "1", "2", "3"), "compare_groups: the groups' rows are not "
     "the same items, once each (a row's item is its name less its group's): 'x': '1', '2'; "
     "'y': '1', '3'"),
    (("x", "y", "x", "y"), ("1", "1", "(1)", "2"), "compare_groups: the groups' rows are "
     "not the same items, once each (a row's item is its name less its group's): 'x': '1', "
     "'1'; 'y': '1', '2'"),
])
def test_group_claims_of_other_items_are_refused(tmp_path, groups, items, message):
    spec = grouped_table(*groups, items=items)
    spec["claims"] = [{"name": "c", "compare_groups": [groups[0], groups[-1]],
                       "metric": "test/ltf_d2", "direction": "lower"}]
    write(tmp_path, "mine.yaml", {"mine": spec})
    with pytest.raises(TableFileError) as error:
        load_tables(tmp_path)
    assert str(error.value).endswith(f"table 'mine', claim 'c', {message}")


@pytest.mark.parametrize(("groups", "message"), [
    (["x", "w"], "compare_groups: 'w' is no row group; groups: x, y, z"),
    (["x", "y"], "direction: the paper's gap A - B is -10, which is not higher"),
])
def test_a_bad_group_claim_is_refused(tmp_path, groups, message):
    spec = grouped_table("x", "y", "x", "y", "z")
    spec["claims"] = [{"name": "c", "compare_groups": groups, "metric": "test/ltf_d2",
                       "direction": "higher"}]
    write(tmp_path, "mine.yaml", {"mine": spec})
    with pytest.raises(TableFileError) as error:
        load_tables(tmp_path)
    assert str(error.value).endswith(f"table 'mine', claim 'c', {message}")


@pytest.mark.parametrize(("see", "message"), [
    (["nowhere", "a above b"], "see ['nowhere', 'a above b']: no such table (mine, other)"),
    (["other", "a below b"], "see ['other', 'a below b']: no such claim of other (a above b)"),
])
def test_a_see_naming_no_claim_is_refused(tmp_path, see, message):
    """``see`` is checked once every table is read: it may name a table of another file."""
    claim = {"name": "a above b", "compare": ["a", "b"], "metric": "test/ltf_d2",
             "direction": "higher"}
    write(tmp_path, "mine.yaml", {"mine": {**valid_table(), "claims": [{**claim, "see": [see]}]}})
    write(tmp_path, "other.yaml", {"other": {**valid_table(), "claims": [claim]}})
    with pytest.raises(TableFileError) as error:
        load_tables(tmp_path)
    assert str(error.value) == (f"{tmp_path / 'mine.yaml'}: table 'mine', claim 'a above b', "
                                f"{message}")
