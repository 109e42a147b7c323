"""mathrl: a reproducibility pipeline for RL training-stability research.

Tiny GPTs learn arithmetic with a supervised warm-up and then RL; grids of runs reproduce
entropy collapse, vanishing gradients, reward hacking and the batch-size and
hyperparameter trade-offs, measured rather than described.
"""

import os

__version__ = "0.1.0"

# The CPU kernels torch, oneMKL and oneDNN use: each picks the widest vector unit it finds, so an AVX-512 machine sums
# in another order than an AVX2 one and trains other runs (a difference in the last bit is carried forward by every
# update). Verdicts do not depend on that: they are replicated over independent warm-ups, whose variation any rerun
# draws anew. A user who wants bit-identical reruns across x86 CPUs with AVX2 and FMA sets MATHRL_CPU_PINS=avx2,
# which pins all three to AVX2 (about a third slower on an AVX-512 machine).
CPU_KERNEL_PINS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
PINS_SWITCH = "MATHRL_CPU_PINS"  # avx2: pin the kernels; unset (the default): each library's fastest path


def _cpuinfo(field: str) -> str | None:
    """The first value of `field` in /proc/cpuinfo, None where there is none or it is unreadable."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_flags() -> set[str]:
    """The instruction-set flags of this machine's CPU (/proc/cpuinfo), empty where unreadable."""
    return set((_cpuinfo("flags") or "").split())


def kernel_pins(flags: set[str], environ) -> dict:
    """The variables that pin the CPU kernels to AVX2, where the user asked for them (MATHRL_CPU_PINS=avx2): none on a
    CPU without AVX2 and FMA (forcing them there would stop the process on an illegal instruction), and none the user
    has set already."""
    if environ.get(PINS_SWITCH, "").strip().lower() != "avx2" or not {"avx2", "fma"} <= flags:
        return {}
    return {key: value for key, value in CPU_KERNEL_PINS.items() if key not in environ}


# Before torch is imported by any mathrl process (each reads these once, at its first kernel call).
os.environ.update(kernel_pins(cpu_flags(), os.environ))


def versions() -> dict:
    """The versions a result was computed with (recorded in every summary.json)."""
    import platform

    import numpy
    import torch

    return {
        "mathrl": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "cpu": cpu_model(),
        # The CPU kernels torch picked (AVX2, AVX512, ...): they fix the order of float sums, and a
        # trained policy carries a difference in the last bit forward, so another path trains another run.
        "cpu_kernels": torch.backends.cpu.get_cpu_capability(),
        # oneMKL's and oneDNN's paths are set by the environment alone (torch does not report them): the variables
        # as this process had them, None where unset (each library then takes the widest unit it finds)
        "kernel_env": {key: os.environ.get(key) for key in (*CPU_KERNEL_PINS, PINS_SWITCH)},
    }


def cpu_model() -> str:
    """This machine's CPU as the kernel names it (/proc/cpuinfo's model name), else what platform says."""
    import platform

    return _cpuinfo("model name") or platform.processor() or platform.machine()


def git_state(where=None) -> dict:
    """The code a result was computed with: ``{"commit": sha, "clean": bool}`` of the git
    checkout that holds this package (clean: no change to tracked files), or both None where
    that is not a git checkout or git is missing."""
    import subprocess
    from pathlib import Path

    cwd = Path(where) if where is not None else Path(__file__).resolve().parent

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return {"commit": None, "clean": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "clean": None if status is None else status == ""}
