"""The container build files agree with the charts, the console scripts and localkube.

No container engine runs here, so the Dockerfile is checked as text: one target per image the
charts reference, each starting the console script localkube runs for that image name, all as
the numeric non-root user the charts' securityContext expects. ``images/build.sh`` (behind
``make images``) must say clearly that it needs a container engine when there is none.
"""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
from chart_rendering import KRUNTIMES, REPO, RUNTIMES_CHART, values_file

from localkube.images import ImageTable

DOCKERFILE = REPO / "images" / "Dockerfile"
BUILD = REPO / "images" / "build.sh"
IMAGES = ("runtimed", "controlplane", "gateway", "python-runtime", "bash-runtime")


def stages() -> dict[str, list[str]]:
    """Dockerfile stage name -> its instruction lines (continuations joined)."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    result: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.IGNORECASE)
        if match:
            current = result.setdefault(
                match.group(2) or match.group(1), [f"FROM {match.group(1)}"]
            )
            continue
        if current is None:  # global ARGs before the first FROM
            assert line.upper().startswith("ARG "), line
            continue
        current.append(line)
    return result


def resolved(stage: str, instruction: str) -> str | None:
    """The last ``instruction`` value of ``stage`` or of the stages it is built FROM."""
    all_stages = stages()
    while stage in all_stages:
        lines = all_stages[stage]
        for line in reversed(lines):
            if line.upper().startswith(instruction + " "):
                return line.split(" ", 1)[1].strip()
        stage = lines[0].split(" ", 1)[1]
    return None


def test_one_target_per_image_charts_and_localkube_use() -> None:
    targets = stages()
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    table = ImageTable.load(None)
    for image in IMAGES:
        assert image in targets, f"images/Dockerfile has no target {image}"
        entrypoint = resolved(image, "ENTRYPOINT")
        assert entrypoint is not None, image
        (command,) = re.findall(r'\["([^"]+)"', entrypoint)
        assert command in scripts, f"{image}: ENTRYPOINT {command} is not a console script"
        # localkube runs image kruntimes/<image> as the same console script
        entry = table.resolve(f"kruntimes/{image}")
        assert Path(entry.entrypoint[0]).name == command, (image, entry.entrypoint)


def test_images_run_as_the_non_root_user_the_charts_expect() -> None:
    expected = {
        values_file(KRUNTIMES, "values.yaml")["podSecurityContext"]["runAsUser"],
        values_file(RUNTIMES_CHART, "values.yaml")["podSecurityContext"]["runAsUser"],
    }
    assert len(expected) == 1
    (uid,) = expected
    for image in IMAGES:
        user = resolved(image, "USER")
        assert user == f"{uid}:{uid}", (image, user)
    # the project is installed from the repository in the build stage
    build = " ".join(stages()["build"])
    assert "COPY src ./src" in build
    assert "pip install --no-compile ." in build


def test_chart_image_repositories_are_the_dockerfile_targets() -> None:
    images = values_file(KRUNTIMES, "values.yaml")["images"]
    runtime_images = values_file(RUNTIMES_CHART, "values.yaml")["images"]
    repositories = {
        images["controlplane"]["repository"],
        images["gateway"]["repository"],
        runtime_images["runtimed"]["repository"],
        runtime_images["pythonRuntime"]["repository"],
        runtime_images["bashRuntime"]["repository"],
    }
    assert repositories == {f"kruntimes/{image}" for image in IMAGES}


def test_build_script_explains_a_missing_container_engine(tmp_path: Path) -> None:
    env = {**os.environ, "DOCKER": str(tmp_path / "no-docker")}
    result = subprocess.run(
        ["bash", str(BUILD)], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 2
    assert "building images needs Docker" in result.stderr
    assert "krt dev up" in result.stderr

    fake = tmp_path / "docker"
    fake.write_text("#!/bin/sh\necho 'Cannot connect to the Docker daemon' >&2\nexit 1\n")
    fake.chmod(0o755)
    result = subprocess.run(
        ["bash", str(BUILD)],
        env={**os.environ, "DOCKER": str(fake)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert "no container engine answers" in result.stderr


@pytest.mark.parametrize("target", ["nope", "gateway nope"])
def test_build_script_rejects_unknown_images(target: str) -> None:
    result = subprocess.run(
        ["bash", str(BUILD), *target.split()],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert "unknown image 'nope'" in result.stderr


def test_build_script_builds_every_target_with_a_working_engine(tmp_path: Path) -> None:
    """With an engine (a recording stand-in), every target is built with the right tag."""
    log = tmp_path / "calls"
    fake = tmp_path / "docker"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    fake.chmod(0o755)
    result = subprocess.run(
        ["bash", str(BUILD)],
        env={**os.environ, "DOCKER": str(fake), "REGISTRY": "reg.example/k", "TAG": "t1"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    builds = [line for line in log.read_text().splitlines() if line.startswith("build")]
    assert len(builds) == len(IMAGES)
    for image, line in zip(IMAGES, builds, strict=True):
        assert f"--target {image} --tag reg.example/k/{image}:t1" in line
        assert line.endswith(str(REPO))
        assert f"--file {DOCKERFILE}" in line
