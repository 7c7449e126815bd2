#!/bin/sh
# Example exec task: count the bytes, words and lines of the body with awk.
#
# Body: any JSON object.  Result: {"bytes": N, "words": N, "lines": N}
# Exit 0 is success; 65 (EX_DATAERR) rejects; anything else is an error.
# Whatever goes to stderr is logged, one line per line.
#
# Config:
#   config: { command: [/usr/local/share/doc/taskmill/examples/exec/wc.sh] }
set -eu
echo "message ${TASKMILL_MESSAGE_ID:-?}, attempt ${TASKMILL_ATTEMPT:-?}" >&2
awk '
	{ bytes += length($0) + 1; words += NF; lines++ }
	END {
		if (lines == 0) { print "empty body" > "/dev/stderr"; exit 65 }
		printf "{\"bytes\":%d,\"words\":%d,\"lines\":%d}\n", bytes - 1, words, lines
	}'
