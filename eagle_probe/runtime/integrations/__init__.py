"""One module per SGLang surface; ALL lists what install() patches."""

from . import acceptance, deepseek_v2, llama_eagle3, model_runner

ALL = (model_runner.INTEGRATION, deepseek_v2.INTEGRATION, llama_eagle3.INTEGRATION,
       llama_eagle3.KIMI_INTEGRATION, acceptance.INTEGRATION, acceptance.RETRACTION_INTEGRATION)
