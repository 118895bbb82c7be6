"""The GitHub Actions workflow that builds, tests and publishes the book.

actionlint checks it here, so a malformed workflow fails `make test` and not the first push.
The linter and ShellCheck (for the `run:` scripts) are binaries shipped in PyPI wheels that
requirements.txt pins, so they sit in the same virtual environment as this interpreter.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
BOOK = ROOT / ".github" / "workflows" / "book.yml"
BIN = Path(sys.executable).parent

#: owner/repo[/path]@vMAJOR[.MINOR[.PATCH]], or @ a full commit SHA.
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@(v\d+(\.\d+){0,2}|[0-9a-f]{40})$")


def tool(name: str) -> Path:
    path = BIN / name
    if not path.is_file():
        pytest.fail(f"{name} is not in {BIN}: run `pip install -r requirements.txt` (its "
                    "wheel exists for Linux x86_64, where CI runs; requirements.txt says where "
                    "else)")
    return path


def actionlint(*paths: Path) -> subprocess.CompletedProcess[str]:
    """Run actionlint with ShellCheck from the venv and no other external checker."""
    command = [str(tool("actionlint")), "-no-color", "-oneline",
               "-shellcheck", str(tool("shellcheck")), "-pyflakes=", *map(str, paths)]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)


def uses_of(workflow: dict) -> list[str]:
    """Every `uses:` of a workflow: reusable workflows of jobs and actions of steps."""
    found = []
    for job in workflow["jobs"].values():
        if "uses" in job:
            found.append(job["uses"])
        found += [step["uses"] for step in job.get("steps", []) if "uses" in step]
    return found


def step_using(steps: list[dict], action: str) -> dict:
    """The first step that uses ``action`` (any version)."""
    return next(step for step in steps if step.get("uses", "").startswith(action + "@"))


def load(path: Path) -> dict:
    workflow = yaml.safe_load(path.read_text())
    # YAML 1.1 reads the key `on` as the boolean True.
    if True in workflow:
        workflow["on"] = workflow.pop(True)
    return workflow


def test_there_is_a_workflow() -> None:
    assert BOOK in WORKFLOWS


def test_actionlint_passes_every_workflow() -> None:
    result = actionlint(*WORKFLOWS)
    assert result.returncode == 0, result.stdout + result.stderr


#: Mistakes actionlint must catch, each as (what is replaced, by what, a word of its message).
MISTAKES = {
    "unknown key": ("    steps:\n      - uses: actions/checkout",
                    "    stepz:\n      - uses: actions/checkout", "stepz"),
    "job that does not exist": ("needs: build", "needs: biuld", "biuld"),
    "undefined step in an expression": ("steps.deployment.outputs", "steps.deploy.outputs",
                                        "deploy"),
    "broken YAML": ("permissions:\n  contents: read", "permissions:\n  contents: [read",
                    "yaml"),
    "shell error in a run script": ('if path="$(command -v "$name")"; then',
                                    'if path="$(command -v "$name")" then', "shellcheck"),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_actionlint_rejects_a_malformed_copy(tmp_path: Path, mistake: str) -> None:
    old, new, word = MISTAKES[mistake]
    text = BOOK.read_text()
    assert text.count(old) == 1, f"the workflow no longer contains {old!r}: update this test"
    broken = tmp_path / ".github" / "workflows" / "book.yml"
    broken.parent.mkdir(parents=True)
    broken.write_text(text.replace(old, new))
    result = actionlint(broken)
    assert result.returncode == 1, f"actionlint accepted a workflow with a {mistake}"
    assert word.lower() in result.stdout.lower(), result.stdout + result.stderr


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_action_is_pinned_to_a_release(path: Path) -> None:
    uses = uses_of(load(path))
    assert uses, f"{path.name} uses no action"
    loose = [u for u in uses if not PINNED.match(u)]
    assert not loose, f"{path.name}: actions not pinned to a release tag or commit: {loose}"


def test_the_pin_check_catches_a_branch() -> None:
    for loose in ("actions/checkout@main", "actions/checkout", "actions/checkout@v4-beta",
                  "docker://alpine:latest"):
        assert not PINNED.match(loose), loose
    for pinned in ("actions/checkout@v5", "actions/cache@v4.2.3",
                   "github/codeql-action/init@v3", "actions/checkout@" + "a" * 40):
        assert PINNED.match(pinned), pinned


def test_workflow_builds_tests_and_publishes_as_a_newcomer_does() -> None:
    workflow = load(BOOK)
    assert workflow["on"]["push"]["branches"] == ["main"]
    assert "workflow_dispatch" in workflow["on"]
    build, deploy = workflow["jobs"]["build"], workflow["jobs"]["deploy"]
    runs = [step.get("run", "").strip() for step in build["steps"]]
    assert runs.index("make book") < runs.index("make test"), runs
    python = step_using(build["steps"], "actions/setup-python")
    assert python["with"]["python-version"] == "3.11"
    assert python["with"]["cache"] == "pip"
    upload = step_using(build["steps"], "actions/upload-pages-artifact")
    # The instructor's edition unless the student edition is asked for, by hand or by the
    # repository variable; the student edition is built before it is uploaded.
    assert build["env"]["EDITION"] == \
        "${{ inputs.edition || vars.BOOK_EDITION || 'instructor' }}"
    assert workflow["on"]["workflow_dispatch"]["inputs"]["edition"]["options"] == [
        "instructor", "student"]
    assert upload["with"]["path"] == \
        "${{ env.EDITION == 'student' && '_build/student' || '_build/html' }}"
    student = build["steps"][runs.index("make student")]
    assert student["if"] == "env.EDITION == 'student'"
    assert runs.index("make test") < runs.index("make student") < build["steps"].index(upload)
    assert deploy["needs"] == "build"
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["environment"]["name"] == "github-pages"
    assert step_using(deploy["steps"], "actions/deploy-pages")
    assert workflow["permissions"] == {"contents": "read"}
    assert workflow["concurrency"]["group"] == "pages"


def test_execution_cache_is_keyed_on_what_invalidates_it() -> None:
    """The cached chapters are restored with the fingerprint that keeps them valid."""
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    try:
        from attnbook_sphinx import FINGERPRINT_FILE, FINGERPRINT_GLOBS
    finally:
        sys.path.remove(str(ROOT / "book" / "_ext"))
    build = load(BOOK)["jobs"]["build"]
    cache = step_using(build["steps"], "actions/cache")
    paths = cache["with"]["path"].split()
    assert "_build/.jupyter_cache" in paths
    assert f"_build/{FINGERPRINT_FILE}" in paths, "without it the extension clears the cache"
    key = cache["with"]["key"]
    for pattern in FINGERPRINT_GLOBS:
        top = pattern.split("/")[0]
        assert f"'{top}" in key, f"the cache key ignores {pattern}"


def test_workflow_runs_only_targets_the_makefile_has() -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([\w-]+):", makefile, flags=re.MULTILINE))
    build = load(BOOK)["jobs"]["build"]
    called = {word for step in build["steps"]
              for word in re.findall(r"\bmake ([\w-]+)", step.get("run", ""))}
    assert {"book", "test"} <= called
    assert called <= targets, f"the workflow runs make targets that do not exist: " \
        f"{sorted(called - targets)}"
