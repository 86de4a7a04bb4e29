"""The offline commands (the `eagle-probe` CLI). Never loaded by a serving process."""
