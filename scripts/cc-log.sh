#!/bin/sh
# cc-log.sh LOG COMMAND...: runs one compile command (the Makefile's, for every object of a
# build); its messages go to stderr as usual and into LOG too, after a first line that is the
# command itself.  tests/scripts/test_warnings.sh reads the logs of make test's gcc build
# instead of compiling every file a second time to see that gcc warns about none.
log=$1
shift
printf '%s\n' "$*" >"$log" || exit 1
"$@" 2>>"$log"
s=$?
tail -n +2 "$log" >&2
exit $s
