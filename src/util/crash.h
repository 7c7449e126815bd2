/* crash.h - a fatal signal's last words: signal, task, message, backtrace. */
#ifndef TASKMILL_CRASH_H
#define TASKMILL_CRASH_H

#include <stddef.h>

/*
 * tm_crash_install installs the handler for the signals that end a process
 * with a fault (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) and gives the
 * calling thread an alternate signal stack. On such a signal the handler
 * writes to stderr, in the log's format and with level error: the signal
 * and fault address, the task and message id the thread was running (see
 * tm_crash_enter), and a backtrace, one frame per line; then it restores
 * the default action and re-raises, so the process dies of the signal
 * (systemd and a core dump see the real cause). Call once, from the main
 * thread, before other threads start.
 */
void tm_crash_install(void);

/*
 * tm_crash_thread_init gives the calling thread an alternate signal stack,
 * so a crash caused by a stack overflow can still be reported; returns 0,
 * or -1 when none could be set (the report then runs on the thread's own
 * stack). A stack set already (by a sanitizer runtime) is kept.
 * tm_crash_thread_fini removes and frees the stack set here; call it
 * before the thread ends.
 */
int tm_crash_thread_init(void);
void tm_crash_thread_fini(void);

/*
 * tm_crash_enter records, for the calling thread, the task and message id
 * it is about to run (copied, truncated to fixed buffers: the handler may
 * not allocate); tm_crash_leave clears it. A crash between the two names
 * them. Either may be NULL.
 */
void tm_crash_enter(const char *task, const char *msgid, size_t msgid_len);
void tm_crash_leave(void);

/*
 * tm_crash_name_object tells the handler the file behind a loaded object:
 * plugins are loaded from a private in-memory copy, whose name in the
 * loader (and so in dladdr()) is "/proc/self/fd/N", meaningless in a
 * report. base is the object's load address (dladdr()'s dli_fbase), path
 * is copied (truncated to a fixed buffer). tm_crash_forget_object drops
 * the name before the object is unloaded. Up to TM_CRASH_OBJECTS names are
 * kept; past that a report shows the loader's name. Thread-safe.
 */
#define TM_CRASH_OBJECTS 256
void tm_crash_name_object(const void *base, const char *path);
void tm_crash_forget_object(const void *base);

#endif /* TASKMILL_CRASH_H */
