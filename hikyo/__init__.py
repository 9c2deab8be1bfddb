"""The Hikyo adapter: the HTTPS client (S3, S7.3) behind the engine's ``HikyoServer`` port.

Importing the package installs the log filter that redacts query strings (the cursor, S0.4.2)
from urllib3 and requests log records, so every process that makes Hikyo requests has it.
"""

from . import log_hygiene

log_hygiene.install()
