"""The CPU kernels a mathrl process pins when asked (MATHRL_CPU_PINS=avx2), for bit-identical reruns across x86 CPUs."""

import os
import subprocess
import sys

import pytest

from mathrl import CPU_KERNEL_PINS, PINS_SWITCH, cpu_flags, kernel_pins

AVX2 = {"sse4_2", "avx", "avx2", "fma"}
ASKED = {PINS_SWITCH: "avx2"}


def test_without_the_switch_nothing_is_pinned():
    assert kernel_pins(AVX2 | {"avx512f"}, {}) == {} and kernel_pins(AVX2, {PINS_SWITCH: "no"}) == {}


def test_a_cpu_with_avx2_and_fma_gets_every_pin_when_asked():
    assert kernel_pins(AVX2 | {"avx512f"}, ASKED) == {
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_CBWR": "AVX2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
    }


@pytest.mark.parametrize("flags", [set(), {"sse4_2", "avx"}, {"sse4_2", "avx", "avx2"}, {"fma"}])
def test_a_cpu_without_avx2_and_fma_is_left_alone(flags):
    assert kernel_pins(flags, ASKED) == {}


def test_what_the_user_set_is_kept():
    asked = {**ASKED, "ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "AUTO"}
    assert kernel_pins(AVX2, asked) == {"ONEDNN_MAX_CPU_ISA": "AVX2"}


def _torch_kernels(env: dict) -> str:
    code = "import mathrl, torch; print(torch.backends.cpu.get_cpu_capability())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.strip()


@pytest.mark.skipif(not {"avx2", "fma"} <= cpu_flags(), reason="the pins apply to CPUs with AVX2 and FMA")
def test_a_mathrl_process_trains_on_the_pinned_kernels_when_asked():
    env = {k: v for k, v in os.environ.items() if k not in CPU_KERNEL_PINS and k != PINS_SWITCH}
    assert _torch_kernels({**env, **ASKED}) == "AVX2"
    assert _torch_kernels({**env, **ASKED, "ATEN_CPU_CAPABILITY": "default"}) == "DEFAULT"
    if "avx512f" in cpu_flags():  # unpinned, torch takes the machine's widest unit
        assert _torch_kernels(env) == "AVX512"


def test_versions_record_the_kernel_variables_as_the_process_had_them(monkeypatch):
    """oneMKL's and oneDNN's paths show nowhere but in the environment, so a run's versions carry it."""
    from mathrl import versions

    monkeypatch.setenv("MKL_CBWR", "AUTO")
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    kernel_env = versions()["kernel_env"]
    assert set(kernel_env) == {*CPU_KERNEL_PINS, PINS_SWITCH}
    assert kernel_env["MKL_CBWR"] == "AUTO" and kernel_env["ONEDNN_MAX_CPU_ISA"] is None
