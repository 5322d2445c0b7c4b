"""Create a venv for one check that reuses this Python environment's torch and test tools.

Problem: `make test-lower-bounds` and `make test-wheel` need a venv of their own (older lightning
and jsonargparse; the built wheel) that still sees the installed torch, pytest and pytest-xdist.
`python -m venv --system-site-packages`, run from inside a venv, links the new venv to the BASE
interpreter's site-packages, not the venv's: it sees none of them, and pip then downloads a
multi-GB CUDA torch into it.

Method: create the venv without pip or system site-packages, and write a `.pth` file into its
site-packages that adds, with `site.addsitedir`, every site-packages folder of the interpreter
running this script (`site.getsitepackages()`, which in a venv made with
`--system-site-packages` includes the base's, and the user site where it is enabled), so their
own `.pth` files work too. Python reads `.pth` files after it put the venv's own site-packages
on `sys.path`, so what is installed in the new venv shadows this environment's packages.

Contract: `python .ci/child_venv.py DIR [PIP_INSTALL_ARGS...]` (re)creates DIR, checks that
DIR/bin/python finds the same torch as this interpreter, then runs `pip install
PIP_INSTALL_ARGS` there (this environment's pip), with a constraint that pins torch to the
installed version: pip fails rather than download another torch. Exits 2 with one line when
this interpreter has no torch or the venv does not see it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import site
import subprocess
import sys
import venv

USAGE = "usage: python .ci/child_venv.py DIR [PIP_INSTALL_ARGS...]"


def fail(message: str) -> None:
    """Print `message` as one line on stderr and exit 2."""
    print(f"child_venv: {message}", file=sys.stderr)
    raise SystemExit(2)


def site_dirs() -> list[str]:
    """This interpreter's site-packages folders, in the order Python adds them to `sys.path`."""
    user = [site.getusersitepackages()] if site.ENABLE_USER_SITE else []
    return [d for d in dict.fromkeys(user + site.getsitepackages()) if os.path.isdir(d)]


def child_python(path: str) -> str:
    """The interpreter of the venv at `path` (POSIX, like the Makefile)."""
    return os.path.join(path, "bin", "python")


def child_site_packages(path: str) -> str:
    """The site-packages folder of the venv at `path`, as its own interpreter reports it."""
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return subprocess.check_output([child_python(path), "-c", code], text=True).strip()


def torch_origin(python: str) -> str | None:
    """Where `python` finds torch's `__init__.py` (without importing it), or None."""
    code = "import importlib.util as u; s = u.find_spec('torch'); print(s.origin if s else '')"
    return subprocess.check_output([python, "-c", code], text=True).strip() or None


def create(path: str) -> None:
    """(Re)create the venv at `path`, seeing this interpreter's site-packages after its own.

    Raises:
        SystemExit: (2) this interpreter has no torch, or the new venv finds another torch.
    """
    spec = importlib.util.find_spec("torch")
    if spec is None:
        fail(f"{sys.executable} has no torch to share; run `make install`")
    venv.create(path, clear=True, symlinks=True)
    lines = "".join(f"import site; site.addsitedir({d!r})\n" for d in site_dirs())
    with open(os.path.join(child_site_packages(path), "_parent_site.pth"), "w") as f:
        f.write(lines)
    found = torch_origin(child_python(path))
    if found != spec.origin:
        fail(f"{path} finds torch at {found}, not {spec.origin}")


def pip_install(path: str, args: list[str]) -> int:
    """`pip install args` in the venv at `path`, with torch pinned to this interpreter's.

    Returns:
        pip's exit status (not 0 where e.g. a requirement needs another torch).
    """
    pin = os.path.join(path, "torch-pin.txt")
    with open(pin, "w") as f:
        f.write(f"torch=={importlib.metadata.version('torch')}\n")
    pip = [child_python(path), "-m", "pip", "install", "--quiet", "-c", pin]
    return subprocess.call(pip + args)


def main(argv: list[str]) -> None:
    if not argv or argv[0].startswith("-"):
        fail(USAGE)
    create(argv[0])
    raise SystemExit(pip_install(argv[0], argv[1:]) if argv[1:] else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
