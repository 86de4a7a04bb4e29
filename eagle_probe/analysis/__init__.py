"""Pure functions that turn observations into facts and findings. No SGLang import here."""
