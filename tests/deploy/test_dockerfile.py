"""The application image: base, user, command, and that it contains what the code imports."""

from __future__ import annotations

import ast
import fnmatch
import json
import re

from tests.deploy.support import DOCKERFILE, DOCKERIGNORE, REPO

FIRST_PARTY = {"jobsvc", "scheduler_worker", "executor_worker", "coordination", "tools", "tests"}
API_COMMAND = ["gunicorn", "--config", "deploy/gunicorn.conf.py", "jobsvc.wsgi:application"]


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    result = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            result.append((keyword.upper(), rest.strip()))
    return result


def build_args() -> dict[str, str]:
    return dict(
        rest.split("=", 1) for keyword, rest in instructions() if keyword == "ARG" and "=" in rest
    )


def base_images() -> list[str]:
    args = build_args()
    images = []
    for keyword, rest in instructions():
        if keyword == "FROM":
            image = rest.split()[0]
            images.append(re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image))
    return images


def copied_sources() -> list[str]:
    sources = []
    for keyword, rest in instructions():
        if keyword == "COPY" and "--from=" not in rest:
            parts = [part for part in rest.split() if not part.startswith("--")]
            sources.extend(parts[:-1])
    return sources


def dockerignore_patterns() -> list[str]:
    lines = DOCKERIGNORE.read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_the_base_is_a_pinned_python_3_11_slim():
    for image in base_images():
        assert re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?", image), image


def test_the_locked_runtime_requirements_are_installed_by_their_hashes():
    runs = " ".join(rest for keyword, rest in instructions() if keyword == "RUN")
    assert "requirements/runtime.txt" in " ".join(copied_sources())
    assert re.search(r"pip install .*--require-hashes .*-r \S*requirements/runtime.txt", runs)


def test_the_processes_run_as_an_unprivileged_user():
    users = [rest for keyword, rest in instructions() if keyword == "USER"]
    assert users, "no USER: the image would run as root"
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}


def test_the_default_command_is_the_api_under_gunicorn():
    (cmd,) = [rest for keyword, rest in instructions() if keyword == "CMD"]
    assert json.loads(cmd) == API_COMMAND


def test_everything_copied_exists_and_is_not_ignored():
    patterns = dockerignore_patterns()
    for source in copied_sources():
        assert (REPO / source).exists(), source
        path = source.rstrip("/")
        ignored = [p for p in patterns if fnmatch.fnmatch(path, p) or path.startswith(p + "/")]
        assert not ignored, f"{source} is excluded by .dockerignore {ignored}"


def test_the_image_contains_every_first_party_module_its_code_imports():
    copied = {source.rstrip("/") for source in copied_sources()}
    packages = [REPO / name for name in copied if (REPO / name).is_dir()]
    for package in packages:
        for file in package.rglob("*.py"):
            for node in ast.walk(ast.parse(file.read_text(), filename=str(file))):
                for module in _imported_modules(node):
                    if module.split(".")[0] in FIRST_PARTY:
                        assert _in_image(module, copied), (
                            f"{file.relative_to(REPO)} imports {module}, not in the image"
                        )


def _in_image(module: str, copied: set[str]) -> bool:
    """A module is in the image if its file, or a directory holding it, was copied."""
    path = module.replace(".", "/")
    if path + ".py" in copied or path + "/__init__.py" in copied:
        return True
    parts = path.split("/")
    return any("/".join(parts[:n]) in copied for n in range(1, len(parts) + 1))


def test_local_state_and_secrets_stay_out_of_the_build_context():
    patterns = set(dockerignore_patterns())
    assert {".git", ".venv", ".state", ".env"} <= patterns


def _imported_modules(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module]
    return []
