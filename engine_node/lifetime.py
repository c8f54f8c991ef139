"""Child processes that end with the process that started them, however it ended (SIGKILL included).

On Linux, `tied_to_parent(argv)` is a command line that sets PR_SET_PDEATHSIG (the kernel sends the child a signal
when its parent dies) and then execs `argv`: the pid, the arguments and the environment stay the command's own. The
setting survives exec, so it also holds for programs we cannot change (vLLM). It is set in the child by a tiny
launcher rather than in a `preexec_fn`, which is unsafe in a process with threads. Elsewhere the command just runs.

`python -m engine_node.lifetime PARENT_PID SIGNAL COMMAND...` is the same launcher for shell scripts
(`scripts/run.sh`).
"""

import os
import signal
import sys

# Kept to the standard library and to one -c string: it runs before the command's own environment (vLLM's
# interpreter need not have engine_node installed).
_LAUNCHER = """\
import ctypes, os, sys
parent, signal_number, command = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
if sys.platform.startswith("linux"):
    PR_SET_PDEATHSIG = 1
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal_number) != 0:
        sys.exit("prctl(PR_SET_PDEATHSIG) failed: " + os.strerror(ctypes.get_errno()))
    if os.getppid() != parent:
        sys.exit(1)  # the parent died before the setting took effect: nobody is left to stop this command
os.execvp(command[0], command)
"""


def tied_to_parent(argv: list[str], *, sig: int = signal.SIGTERM, parent_pid: int | None = None) -> list[str]:
    """`argv` as a command that gets `sig` when the calling process (or `parent_pid`) dies.

    The signal goes when the *thread* that started the child ends, so start it from a thread that lives as long as
    the process (the main thread, or the asyncio loop's thread).
    """
    parent = os.getpid() if parent_pid is None else parent_pid
    return [sys.executable, "-c", _LAUNCHER, str(parent), str(int(sig)), *argv]


def main(argv: list[str]) -> None:
    if len(argv) < 3 or not argv[0].isdigit():
        sys.exit("usage: python -m engine_node.lifetime PARENT_PID SIGNAL COMMAND [ARG...]")
    name = argv[1].upper()
    sig = int(name) if name.isdigit() else int(signal.Signals[name if name.startswith("SIG") else f"SIG{name}"])
    command = tied_to_parent(argv[2:], sig=sig, parent_pid=int(argv[0]))
    os.execv(command[0], command)  # noqa: S606 - the launcher, then the command: no shell on the way


if __name__ == "__main__":
    main(sys.argv[1:])
