# The Python host's boundary, fuzzed (tests/tools/pyfuzz.c running
# tests/hosts/pyfuzz.py through python.so as the daemon loads it): return
# values of every type (huge ints, NaN, bytes, sets, deep, cyclic, objects
# whose __repr__/__str__/__iter__ raise, generators, lone surrogates, big
# strings), exceptions of every kind (BaseExceptions, ones whose text
# raises or never ends, a metaclass whose __name__ raises) and code that
# catches taskmill.Stopped, from 2 threads with a 200 ms deadline: no
# crash, every run with an outcome (and a reason when it failed), none
# ending later than its deadline + 1 s. TM_FUZZ_SECONDS (default 20;
# `make check-soak`: 600), TM_FUZZ_SEED (default: from the clock; printed
# to repeat a run).
export LSAN_OPTIONS=suppressions=$TM_SRCDIR/tests/hosts/lsan-python.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}
FUZZ=$TM_BUILD/test-tools/pyfuzz
[[ -f $TM_PLUGINS/python.so ]] || fail "python.so not built (python3-dev)"
[[ -x $FUZZ ]] || fail "$FUZZ not built (make test-plugins)"
seconds=${TM_FUZZ_SECONDS:-20}
seed=${TM_FUZZ_SEED:-$(date +%s)}
note "pyfuzz for ${seconds}s from seed $seed (TM_FUZZ_SEED=$seed repeats it)"
rc=0
timeout -k 5 $((seconds + 60)) "$FUZZ" "$TM_PLUGINS/python.so" \
	"$TM_SRCDIR/tests/hosts" "$seconds" "$seed" 2 200 \
	>"$TEST_DIR/fuzz.out" 2>"$TEST_DIR/fuzz.err" || rc=$?
tail -n 20 "$TEST_DIR/fuzz.err" >&2
cat "$TEST_DIR/fuzz.out" >&2
grep -E 'ERROR: AddressSanitizer|runtime error' "$TEST_DIR/fuzz.err" && fail "sanitizer report"
assert_eq 0 "$rc" "pyfuzz exit status (seed $seed)"
grep -Eq '^pyfuzz: [1-9][0-9]* runs' "$TEST_DIR/fuzz.out" || fail "pyfuzz ran nothing"
