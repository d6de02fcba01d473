"""The fleet's image: the Containerfile and scripts/build-image.sh agree, without
building anything (a build takes minutes; scripts/image-check.sh does one in CI).
The script's --dry-run prints the commands it would run, --stage-only writes the
build context: the tests read both against the Containerfile."""
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from cxlbench.version import __version__

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "build-image.sh"
CHECK = REPO / "scripts" / "image-check.sh"
CONTAINERFILE = REPO / "Containerfile"


def build_image(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, cwd=REPO, timeout=60)


def dry_run(*args: str) -> list[str]:
    """The commands --dry-run prints, one per line, without the leading '+ '."""
    r = build_image("--dry-run", "--engine", "podman", *args)
    assert r.returncode == 0, r.stderr
    return [line[2:] for line in r.stdout.splitlines() if line.startswith("+ ")]


def build_command(lines: list[str]) -> str:
    [line] = [x for x in lines if x.startswith("podman build ")]
    return line


def stages() -> list[tuple[str, str]]:
    """(name, text) of each FROM ... AS name stage."""
    text = CONTAINERFILE.read_text()
    parts = re.split(r"^FROM \S+ AS (\w+)\n", text, flags=re.M)
    return list(zip(parts[1::2], parts[2::2]))


def arg_defaults() -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(.*)$", CONTAINERFILE.read_text(), flags=re.M))


def test_the_image_scripts_parse_in_bash():
    for script in (SCRIPT, CHECK):
        r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert r.returncode == 0, f"{script.name}: {r.stderr}"


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed (apt-get install shellcheck)")
def test_shellcheck_finds_nothing_in_the_image_scripts():
    r = subprocess.run(["shellcheck", str(SCRIPT), str(CHECK)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


@pytest.mark.parametrize("variant", [[], ["--gpu"], ["--debian-base"]])
def test_every_build_argument_the_script_passes_is_one_the_containerfile_declares(variant):
    command = build_command(dry_run(*variant))
    passed = re.findall(r"--build-arg (\w+)=", command)
    assert "BASE" in passed
    assert set(passed) <= set(arg_defaults()), f"not declared with ARG: {set(passed) - set(arg_defaults())}"
    [target] = re.findall(r"--target (\S+)", command)
    assert target == stages()[-1][0], "the script must build the Containerfile's last stage, the image"


def test_the_images_are_named_after_the_package_version_and_the_last_line_says_how_to_use_them():
    assert f" -t cxlbench:{__version__} " in build_command(dry_run())
    assert f" -t cxlbench:{__version__}-gpu " in build_command(dry_run("--gpu"))
    out = build_image("--dry-run", "--engine", "podman").stdout.splitlines()
    assert out[-1].endswith(f"cxlbench fleet manifests --image REGISTRY/cxlbench:{__version__} ...")
    assert out[-2].endswith(f"podman push cxlbench:{__version__} REGISTRY/cxlbench:{__version__}")
    # docker push takes one argument, the tag to push: tagged first ("requires 1 argument")
    out = build_image("--dry-run", "--engine", "docker").stdout.splitlines()
    assert out[-2].endswith(f"docker tag cxlbench:{__version__} REGISTRY/cxlbench:{__version__} && "
                            f"docker push REGISTRY/cxlbench:{__version__}")


def test_the_gpu_image_is_built_on_a_cuda_base_with_pypis_torch_and_the_gpu_extra():
    command = build_command(dry_run("--gpu"))
    assert re.search(r"--build-arg BASE=\S*nvidia/cuda:\S+-runtime-ubuntu", command)
    assert "--build-arg TORCH_INDEX= " in command and "--build-arg TORCH_SPEC=torch " in command
    assert "--build-arg EXTRAS=gpu " in command
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "gpu" in extras


def test_a_debian_base_is_made_with_mmdebstrap_imported_and_then_built_on():
    lines = dry_run("--debian-base")
    [strap] = [shlex.split(x) for x in lines if x.startswith("mmdebstrap ")]
    assert "--variant=minbase" in strap
    tar = strap[strap.index("bookworm") + 1]
    [imported] = [x for x in lines if x.startswith("podman import ")]
    assert shlex.split(imported)[2] == tar
    base = shlex.split(imported)[3]
    assert f"--build-arg BASE={base} " in build_command(lines)
    assert lines.index(imported) < lines.index(build_command(lines))


def test_the_torch_pin_is_the_makefiles_and_the_s3fs_pin_the_fleet_extras():
    makefile = (REPO / "Makefile").read_text()
    [make_torch] = re.findall(r"^TORCH_SPEC \?= (\S+)$", makefile, flags=re.M)
    assert arg_defaults()["TORCH_SPEC"] == make_torch
    assert f"--build-arg TORCH_SPEC={make_torch} " in build_command(dry_run())
    fleet = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["fleet"]
    assert arg_defaults()["PIP_PACKAGES"] in fleet


def test_the_staged_context_holds_everything_the_containerfile_copies_and_no_build_output(tmp_path):
    wheel = tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"not really a wheel")
    cert = tmp_path / "ca.crt"
    cert.write_text("-----BEGIN CERTIFICATE-----\n")
    r = build_image("--stage-only", "--workdir", str(tmp_path / "w"), "--torch-wheel", str(wheel),
                    "--pip-cert", str(cert))
    assert r.returncode == 0, r.stderr
    ctx = tmp_path / "w" / "context"
    sources = re.findall(r"^COPY (?!--from)(.+) \S+$", CONTAINERFILE.read_text(), flags=re.M)
    for source in " ".join(sources).split():
        assert (ctx / source).exists(), f"the Containerfile copies {source}, which the script does not stage"
    assert (ctx / "wheels" / wheel.name).exists() and (ctx / "certs" / "ca.pem").exists()
    assert (ctx / "suites" / "ci.toml").exists() and (ctx / "cxlbench" / "_native").is_dir()
    built = [p for p in ctx.rglob("*") if p.suffix == ".so" or p.name == "__pycache__"]
    assert not built, f"build output in the context: {built[:3]}"


def test_pips_ca_bundle_and_the_compiler_stay_in_the_build_stage():
    (_, build), (_, image) = stages()
    assert "cxlbench-build-certs" in build and "certs" not in image
    assert "gcc" in build and "gcc" not in image
    copies = re.findall(r"^COPY .*$", image, flags=re.M)
    assert copies == ["COPY --from=build /opt/cxlbench /opt/cxlbench"]


@pytest.mark.parametrize("args, says", [
    (["--base", "debian:bookworm", "--debian-base"], "choose one"),
    (["--gpu", "--debian-base"], "CUDA"),
    (["--torch-wheel", "/nonexistent/torch-1-py3-none-any.whl"], "no such file"),
    (["--torch-wheel", __file__], "not a torch wheel"),
    (["--engine", "lxc"], "podman, buildah or docker"),
    (["--frobnicate"], "unknown option"),
])
def test_bad_options_are_one_line_and_exit_2(args, says):
    r = build_image("--dry-run", *args)
    assert r.returncode == 2
    assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1 and says in r.stderr


def runs() -> list[str]:
    """Each RUN instruction's shell command, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", CONTAINERFILE.read_text())
    return re.findall(r"^RUN (.+)$", text, flags=re.M)


def test_a_run_step_fails_when_any_of_its_commands_fails():
    # `a; b` exits with b's status: a torch install that failed would be hidden by the
    # `rm` after it, and the package's own install would then fetch PyPI's CUDA torch.
    assert runs(), "no RUN found: the pattern no longer matches the Containerfile"
    for command in runs():
        command = re.sub(r"\"[^\"]*\"|'[^']*'", "''", command)     # a ';' inside quotes is no sequence
        compound = command.startswith("if ") and command.endswith("fi") and command.count("fi") == 1
        assert ";" not in command or compound or command.startswith("set -e;"), command
