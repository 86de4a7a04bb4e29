"""An external target class: SGLang's real LlamaForCausalLM with its own setter (ids as given, no +1)."""

from sglang.srt.models.llama import LlamaForCausalLM


class ExternalLlamaForCausalLM(LlamaForCausalLM):
    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.capture_aux_hidden_states = True
        self.model.layers_to_capture = list(layer_ids)


EntryClass = ExternalLlamaForCausalLM
