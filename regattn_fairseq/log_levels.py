"""Library loggers at WARNING unless a command is asked for more (`-v`) (issue #46).

Importing fairseq configures the root logger: some of its modules call `logging.basicConfig`
when they are imported, at DEBUG (fairseq/models/wav2vec/wav2vec2_classification.py) or at
INFO (fairseq/tasks/text_to_speech.py). Every command that imports the plugin would then print
every library's DEBUG and INFO lines (matplotlib's font manager, fairseq's "Please install
tensorboardX"), `--help` included. `basicConfig` does nothing once the root logger has a
handler: `claim_root_logger`, called before the plugin imports fairseq, installs one at WARNING
when nothing has configured logging yet, so that fairseq's calls leave it alone. fairseq's own
commands (fairseq-train, fairseq-hydra-train) configure logging before they import the plugin:
their logs are unchanged.
"""

import logging

FORMAT = "%(levelname)s:%(name)s: %(message)s"


def claim_root_logger() -> None:
    """Configure the root logger at WARNING, unless something already configured it."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format=FORMAT)


def set_verbosity(verbose: int) -> None:
    """The root logger's level for a command's ``-v`` count: WARNING (0), INFO (1), DEBUG (2+)."""
    level = (logging.WARNING, logging.INFO)[verbose] if verbose < 2 else logging.DEBUG
    logging.getLogger().setLevel(level)
