import os

from regattn_fairseq import fairseq_adapter
from regattn_fairseq.fairseq_adapter import RANK_PARAMETERS_DIR_ENV

from . import regattn_lstm, regattn_ner, regattn_snli, regattn_transformer  # noqa: F401  (registration)

# fairseq's CLIs load these models' checkpoints with torch.load(weights_only=True); done here,
# once, because registering the models is what makes their checkpoints loadable by fairseq
fairseq_adapter.allow_namespace_in_checkpoints()
# fairseq's trainer wraps these models in torch DDP for `distributed_world_size > 1`; on CPUs
# (gloo) that needs the adapter's device-argument fix
fairseq_adapter.allow_cpu_data_parallel()
# a sparse output mapping gives tokens (EOS too) probability 0, which fairseq's beam search
# cannot finish with
fairseq_adapter.finish_sparse_output_beam_search()
# a training resumed from its checkpoint continues its seed's run: fairseq would group its
# training batches anew at the resume epoch
fairseq_adapter.resume_on_the_batches_of_an_uninterrupted_run()
# the DDP consistency check: every rank writes its parameters at each checkpoint
if os.environ.get(RANK_PARAMETERS_DIR_ENV):
    fairseq_adapter.save_parameters_on_every_rank(os.environ[RANK_PARAMETERS_DIR_ENV])
