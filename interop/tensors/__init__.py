"""One module per framework's tensor type. Each registers its wrap() recogniser, default context and doctor probe.

Modules here import no framework at module level: frameworks are imported on first real use.
"""
