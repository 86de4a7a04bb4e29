"""One module per SGLang surface; ALL lists what install() patches."""

from . import (
       acceptance,
       block_drafts,
       eagle_worker,
       llama_eagle3,
       model_runner,
       phase_timing,
       request_classes,
       runner_paths,
       targets,
)

ALL = (model_runner.INTEGRATION, targets.INTEGRATION, llama_eagle3.INTEGRATION,
       llama_eagle3.KIMI_INTEGRATION, acceptance.INTEGRATION, acceptance.RETRACTION_INTEGRATION,
       eagle_worker.INTEGRATION, runner_paths.INTEGRATION, request_classes.INTEGRATION, phase_timing.INTEGRATION,
       block_drafts.INTEGRATION)
