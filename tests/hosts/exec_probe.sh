#!/bin/sh
# Test command for the exec host's environment (test_host_exec_secrets.sh):
# writes to $PROBE_DIR/$TASKMILL_MESSAGE_ID the environment it was given
# (/proc/self/environ, as execve passed it, before the shell adds
# anything), then, for each taskmill process above it (its parent, and the
# parent's parent while that is still a taskmill process: the daemon, a
# fork-pool worker, the zygote), whether that process's environ and mem
# can be opened, and what environ holds when it can.
out=$PROBE_DIR/$TASKMILL_MESSAGE_ID
{
	echo "== self $$"
	tr '\0' '\n' </proc/$$/environ
	p=$PPID
	while [ "$p" -gt 1 ]; do
		comm=$(cat "/proc/$p/comm" 2>/dev/null) || break
		case $comm in
		taskmill | tm-*) ;;
		*) break ;;
		esac
		echo "== ancestor $p $comm"
		if env=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null); then
			echo "environ: readable"
			printf '%s\n' "$env"
		else
			echo "environ: denied"
		fi
		if (exec 3<"/proc/$p/mem") 2>/dev/null; then
			echo "mem: readable"
		else
			echo "mem: denied"
		fi
		p=$(sed -n 's/^PPid:[[:space:]]*//p' "/proc/$p/status")
	done
} >"$out.tmp"
mv "$out.tmp" "$out"
echo '{}'
