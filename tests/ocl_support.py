from tests.support.ocl_support import *  # noqa: F401,F403  (moved to tests/support; this path stays for old importers)
