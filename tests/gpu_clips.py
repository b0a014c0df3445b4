from tests.support.gpu_clips import *  # noqa: F401,F403  (moved to tests/support; this path stays for old importers)
