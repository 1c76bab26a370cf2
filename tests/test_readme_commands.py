"""Every command the README files quote still works: each script exists, and each option a quoted
command passes is one its `--help` lists (scripts/main.sh forwards to demo/train.py). Cheap: the
`--help` of every script runs in one process (torch imported once), nothing is trained or timed."""
import functools
import json
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

# In one xdist worker: the scripts' --help run once (_helps's cache is the worker's).
pytestmark = pytest.mark.xdist_group("readme_help")

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "demo" / "README.md", ROOT / "bench" / "README.md",
        *sorted((ROOT / "docs").glob("*.md"))]
# Shell scripts that hand their arguments to a Python script, whose --help lists them.
FORWARDS = {"scripts/main.sh": "demo/train.py"}
# Shell scripts that take no options of their own (their arguments are test files or pip's).
PLAIN_SCRIPTS = {"scripts/setup_env.sh", "scripts/dev_build.sh", "scripts/test.sh", "scripts/test_sanitized.sh"}
# Options of their own that plain scripts take.
SCRIPT_OPTIONS = {"scripts/test.sh": ("--quick",)}
_RUNNERS = ("python ", "bash ", "torchrun ")


def _commands_in(text: str) -> list:
    """Commands in fenced shell blocks (one a line, comments cut) and in inline code spans."""
    found = []
    for block in re.findall(r"```(?:bash|sh|shell|console)?\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = line.split(" #")[0].strip()
            if line.startswith(_RUNNERS):
                found.append(line)
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    for span in re.findall(r"`([^`]+)`", prose):
        span = " ".join(span.split())  # a span may wrap over lines
        if span.startswith(_RUNNERS) and not span.startswith("python/"):
            found.append(span)
    return found


def _all_commands() -> list:
    out = []
    for doc in DOCS:
        name = str(doc.relative_to(ROOT))
        for cmd in _commands_in(doc.read_text()):
            if (name, cmd) not in out:
                out.append((name, cmd))
    return out


def _script_and_args(cmd: str):
    """(repository script, its arguments) of a quoted command; `[--x]` counts as `--x` and other
    bracketed placeholders (`[options]`) are dropped."""
    cmd = re.sub(r"\[(--[\w-]+)\]", r"\1", cmd)
    cmd = re.sub(r"\[[^\]]*\]", "", cmd)
    words = shlex.split(cmd)
    if words[0] == "torchrun":
        words = words[1:]
        while words and words[0].startswith("-"):
            words = words[1:]  # torchrun's own options
        return words[0], words[1:]
    if words[0] == "python" and words[1] == "-m":
        return None, words
    return words[1], words[2:]


# Runs each script as `python SCRIPT --help` would (as __main__, its folder first on sys.path), in one process.
_HELP_DRIVER = """
import contextlib, io, json, runpy, sys
out = {}
for script in sys.argv[1:]:
    sys.argv, sys.path[0], text = [script, "--help"], script.rsplit("/", 1)[0], io.StringIO()
    try:
        with contextlib.redirect_stdout(text):
            runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as e:
        code = e.code or 0
    except BaseException as e:  # noqa: BLE001 (reported by the test that needs this script)
        code = f"{type(e).__name__}: {e}"
    out[script] = (code, text.getvalue())
print(json.dumps(out))
"""


@functools.lru_cache(maxsize=None)
def _helps() -> dict:
    """{script: (exit code or error, its --help)} of every Python script a quoted command runs."""
    run = (FORWARDS.get(s, s) for s, _ in map(_script_and_args, (c for _, c in COMMANDS)) if s is not None)
    scripts = sorted({s for s in run if s.endswith(".py") and (ROOT / s).is_file()})
    r = subprocess.run([sys.executable, "-c", _HELP_DRIVER, *(str(ROOT / s) for s in scripts)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"the --help runs failed:\n{r.stderr[-2000:]}"
    return {str(pathlib.Path(k).relative_to(ROOT)): v for k, v in json.loads(r.stdout.splitlines()[-1]).items()}


def _help(script: str) -> str:
    code, text = _helps()[script]
    assert code == 0, f"{script} --help failed: {code}"
    return text


COMMANDS = _all_commands()


def test_the_readmes_quote_commands():
    assert len(COMMANDS) >= 20
    assert any("bench/ops_bench.py" in c for _, c in COMMANDS)


@pytest.mark.parametrize("doc, cmd", COMMANDS, ids=[f"{d}: {c}" for d, c in COMMANDS])
def test_quoted_command_works(doc, cmd):
    script, args = _script_and_args(cmd)
    if script is None:  # python -m <module>: the module must import
        module = args[2]
        r = subprocess.run([sys.executable, "-c", f"import importlib.util as u; assert u.find_spec({module!r})"],
                           capture_output=True, text=True, cwd=ROOT)
        assert r.returncode == 0, f"{doc}: `{cmd}`: no module {module}"
        return
    assert (ROOT / script).is_file(), f"{doc}: `{cmd}`: {script} is not in the repository"
    if script.endswith(".sh"):
        r = subprocess.run(["bash", "-n", str(ROOT / script)], capture_output=True, text=True)
        assert r.returncode == 0, f"{doc}: `{cmd}`: {r.stderr}"
        if script in PLAIN_SCRIPTS:
            for a in args:
                assert not a.startswith("--") or script == "scripts/dev_build.sh" or \
                    a in SCRIPT_OPTIONS.get(script, ()), \
                    f"{doc}: `{cmd}`: {script} takes no option {a}"
            return
        assert script in FORWARDS, f"{doc}: `{cmd}`: add {script} to FORWARDS or PLAIN_SCRIPTS"
        script = FORWARDS[script]
    text = _help(script)
    for a in args:
        if a.startswith("--"):
            option = a.split("=")[0]
            assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text), \
                f"{doc}: `{cmd}`: {script} has no option {option} (its --help:\n{text})"


def test_readme_example_runs():
    """The README's Python example, as a user would paste it."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert blocks
    r = subprocess.run([sys.executable, "-c", blocks[0]], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "(7, 3, 32)" in r.stdout.replace("torch.Size([7, 3, 32])", "(7, 3, 32)")
