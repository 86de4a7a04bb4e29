"""What runs inside SGLang's processes: install/uninstall, the patcher, one integration per SGLang surface,
process context, observations, the recorder and its sinks. Nothing here imports eagle_probe.commands."""
