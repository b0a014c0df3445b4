from tests.support.cuda_fakes import *  # noqa: F401,F403  (moved to tests/support; this path stays for old importers)
