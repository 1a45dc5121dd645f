import sys

from jobsvc_client.cli import main

sys.exit(main())
