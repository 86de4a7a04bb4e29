"""One module per SGLang surface; ALL lists what install() patches."""

from . import deepseek_v2, model_runner

ALL = (model_runner.INTEGRATION, deepseek_v2.INTEGRATION)
