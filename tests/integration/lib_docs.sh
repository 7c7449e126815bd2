# lib_docs.sh - run the shell blocks of the documentation, as a user would.
#
# Every fenced block opened with ```sh in README.md and docs/*.md is either
# run by docs_run, or carries, on the line just above its fence, a comment
#   <!-- not run: REASON -->
# naming why it cannot run here (it installs into the system, needs
# systemd, ...) and, where one exists, the test that covers it instead.
# Blocks shown with ```console are transcripts (a prompt and what the
# command printed), not commands to run.
#
# docs_run FILE runs FILE's runnable blocks in order, in one bash process
# (so a block's variables and background jobs are there for the next
# block), with errexit and pipefail, in a scratch directory that looks like
# the source tree: build -> $TM_BUILD, conf (a copy), src, plugins, tests.
# `make` is a shell function there that does nothing: the tree was built
# before the tests ran. Whatever the blocks started is killed when they end
# (they run in a session of their own). Extra environment for the blocks
# comes from DOCS_ENV (an array of NAME=VALUE). The blocks get 120 s.

# docs_blocks FILE prints FILE's runnable blocks, each preceded by a
# comment line naming where it starts; fails when a ```sh block is both
# unmarked and empty.
docs_blocks() {
	awk -v file="$1" '
		/^```/ {
			if (inblock) { inblock = 0; next }
			if ($0 == "```sh") {
				if (prev ~ /^<!-- not run: .+ -->$/) { skipping = 1 }
				else { skipping = 0; printf "# --- %s:%d\n", file, NR + 1 }
			} else { skipping = 1 }
			inblock = 1; next
		}
		inblock && !skipping { print; next }
		inblock { next }
		{ if ($0 != "") prev = $0 }
	' "$1"
}

# docs_skipped FILE prints one line per block that is not run, with its
# reason.
docs_skipped() {
	awk -v file="$1" '
		/^```sh$/ && !inblock && prev ~ /^<!-- not run: .+ -->$/ {
			r = prev; sub(/^<!-- not run: /, "", r); sub(/ -->$/, "", r)
			printf "%s:%d: %s\n", file, NR, r
		}
		/^```/ { inblock = !inblock; next }
		{ if ($0 != "") prev = $0 }
	' "$1"
}

# docs_kill_leftovers DIR kills every process whose working directory is
# DIR or below: what the blocks started and did not stop (a daemon, a
# redis-server that daemonized itself).
docs_kill_leftovers() {
	local p cwd
	for p in /proc/[0-9]*; do
		cwd=$(readlink "$p/cwd" 2>/dev/null) || continue
		[[ $cwd == "$1" || $cwd == "$1"/* ]] || continue
		[[ ${p#/proc/} == "$$" || ${p#/proc/} == "$BASHPID" ]] && continue
		kill -KILL "${p#/proc/}" 2>/dev/null || true
	done
}

docs_run() {
	local file=$1 name dir script rc=0
	name=$(basename "$file" .md)
	dir=$TEST_DIR/docs-$name
	mkdir -p "$dir"
	ln -sfn "$TM_BUILD" "$dir/build"
	ln -sfn "$TM_SRCDIR/src" "$dir/src"
	ln -sfn "$TM_SRCDIR/plugins" "$dir/plugins"
	ln -sfn "$TM_SRCDIR/tests" "$dir/tests"
	cp -r "$TM_SRCDIR/conf" "$dir/conf"
	script=$dir/blocks.sh
	{
		echo 'set -eo pipefail'
		echo 'make() { echo "(make: the tree is built already)"; }'
		docs_blocks "$file"
	} >"$script"
	if ! grep -q '^# --- ' "$script"; then
		note "$file: no runnable block"
		return 0
	fi
	note "$file: $(grep -c '^# --- ' "$script") block(s), run in $dir"
	(cd "$dir" && env "${DOCS_ENV[@]}" timeout 120 setsid bash "$script" \
		>"$dir/out.log" 2>&1) || rc=$?
	docs_kill_leftovers "$dir"
	if ((rc != 0)); then
		sed 's/^/#     /' "$dir/out.log" | tail -n 40
		fail "$file: its shell blocks failed (exit status $rc); the output is above"
	fi
	note "$file: ok"
}
