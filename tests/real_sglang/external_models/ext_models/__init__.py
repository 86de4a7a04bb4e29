"""A model package outside SGLang, served through SGLANG_EXTERNAL_MODEL_PACKAGE (SGLang's registry imports each module
and registers its EntryClass): a Llama whose own set_eagle3_layers_to_capture uses the ids as given, a rule no row
of eagle_probe.families describes."""
