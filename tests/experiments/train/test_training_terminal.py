"""A training's terminal shows its progress, its train.log everything (issue #46): the lines
fairseq-hydra-train prints on every run (the composed config, the model printout, torch's
FutureWarning about `torch.cuda.amp.autocast` on a CPU) stay in the log."""

import sys

from regattn_fairseq.experiments.core.tools import run_logged
from regattn_fairseq.experiments.train.fairseq_logs import is_progress

# lines of a real train.log (results/gamma_grids/.../train.log.gz), shortened (no dates)
LOG = """\
[19:26:41,946][fairseq_cli.train][INFO] - {'_name': None, 'common': {'_name': None}}
[19:26:42,002][fairseq_cli.train][INFO] - RegattnLSTMModel(
  (encoder): LSTMEncoder(
    (embed_tokens): Embedding(7968, 128, padding_idx=1)
  )
)
[19:26:42,003][fairseq_cli.train][INFO] - num. shared model params: 3,446,560
[19:26:46,910][fairseq.logging.progress_bar][WARNING] - wandb not found, pip install wandb
/f/fairseq_task.py:531: FutureWarning: `torch.cuda.amp.autocast(args...)` is deprecated.
  with torch.cuda.amp.autocast(enabled=(isinstance(optimizer, AMPOptimizer))):
[19:26:53,609][train_inner][INFO] - {"epoch": 1, "update": 0.11, "loss": "9.831"}
[19:27:17,174][valid][INFO] - {"epoch": 1, "valid_loss": "7.045", "valid_ppl": "132.07"}
[19:27:17,290][fairseq.checkpoint_utils][INFO] - Saved checkpoint /c/ckpt.pt (epoch 1 @ 454 updates
[19:27:17,291][train][INFO] - {"epoch": 1, "train_loss": "8.111", "train_ppl": "276.4"}
[19:29:01,001][fairseq_cli.train][INFO] - early stop since valid performance hasn't improved
[19:29:01,002][fairseq_cli.train][ERROR] - something failed
"""
SHOWN = [10, 11, 12, 13, 14, 15]  # the progress lines above (0-based)


def test_the_terminal_shows_progress_and_the_log_keeps_every_line(tmp_path, capsys):
    source = tmp_path / "output.txt"
    source.write_text(LOG)
    printer = f"import sys; sys.stdout.write(open({str(source)!r}).read())"
    log = tmp_path / "train.log"
    output = run_logged([sys.executable, "-c", printer], log, show=is_progress)
    lines = LOG.splitlines()
    assert capsys.readouterr().err.splitlines() == [lines[i] for i in SHOWN]
    assert output == LOG
    assert log.read_text().splitlines()[1:] == lines  # after the "$ command" line
