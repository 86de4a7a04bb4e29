"""Where this process sits: its ranks, which worker owns a module, and whether a CUDA graph is being captured."""
