"""Runs a molecule scenario the way the README tells role developers to (scripts/molecule.sh) and reads
molecule's report of its steps. Molecule names a step "[cluster > verify] Executed: Successful" when its
output is not a terminal and "cluster ➜ verify: Executed: Successful" when it is; both are read."""

import os
import re
import subprocess

from .slurm_harness import ROOT


def run_scenario(scenario: str) -> str:
    """Run `scripts/molecule.sh SCENARIO` to the end and answer its output as one stream (each step's Ansible
    output sits between molecule's lines about the step), without colour codes."""
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", NO_COLOR="1")
    proc = subprocess.run(["bash", str(ROOT / "scripts/molecule.sh"), scenario], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1200, check=False)
    output = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout)
    assert proc.returncode == 0, f"scripts/molecule.sh {scenario} failed:\n{output[-6000:]}"
    return output


def _bracketed(output: str, scenario: str) -> str:
    """Molecule's terminal form of a step name, rewritten to the bracketed form."""
    return re.sub(rf"{scenario} ➜ (\w+):", rf"[{scenario} > \1]", output)


def steps_run(output: str, scenario: str) -> list[str]:
    """The steps molecule reports as successful, in order."""
    return re.findall(rf"\[{scenario} > (\w+)\] Executed: Successful", _bracketed(output, scenario))


def check_step_changes(output: str, scenario: str) -> list[tuple[str, str]]:
    """(host, changed count) from the recap of the converge playbook run under --check."""
    marker = rf"\[{scenario} > check\]"
    check = re.search(rf"{marker} Executing(.*?){marker} Executed", _bracketed(output, scenario), re.S)
    assert check, f"molecule did not report a check step for {scenario}"
    return re.findall(r"(\S+)\s+: ok=\d+\s+changed=(\d+)", check.group(1))
