"""Invalid attention options under `fairseq-train` end as argparse's errors do (issue #26).

fairseq's argparse checks each option alone; regattn's attention options can only be checked
together (an option that does not apply to the chosen mapping, a value the mapping refuses),
which happens when the model is built (`modules.attention_options`). Uncaught there, the
`AttentionOptionError` would end the program with a 15-frame traceback; this hook prints it as
argparse prints a bad argument, ``fairseq-train: error: <message>``, and exits with status 2.
Every other exception keeps Python's traceback."""

import os
import sys

from .modules.attention_options import AttentionOptionError


def _one_line(previous):
    def hook(kind, error, traceback):
        if not isinstance(error, AttentionOptionError):
            previous(kind, error, traceback)
            return
        sys.stdout.flush()
        sys.stderr.write(f"{os.path.basename(sys.argv[0])}: error: {error}\n")
        sys.stderr.flush()
        # an exception hook cannot choose the exit status: 2 is argparse's for a bad argument
        os._exit(2)

    hook.regattn_one_line = True
    return hook


def install() -> None:
    """Install the hook once (the plugin may be imported more than once: `--user-dir` and
    `import regattn_fairseq`)."""
    if not getattr(sys.excepthook, "regattn_one_line", False):
        sys.excepthook = _one_line(sys.excepthook)
