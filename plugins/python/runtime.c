/* runtime.c - the embedded interpreter: start, watchdog, load, run. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "py_host.h"

#include <assert.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/*
 * One interpreter per process. It is started by the first
 * cb_worker_init in the process (pthread_once): in the fork pool that is
 * in each child, after its fork, never in the zygote or the daemon. The
 * GIL is held only while Python code runs; in the thread pool it
 * serialises the runs' Python code.
 */

/* PY_WATCH_MS: how often the watchdog looks for runs past their
 * deadline. */
#define PY_WATCH_MS 20
/* PY_MAX_RUNS: runs the watchdog follows at once (worker threads); a run
 * beyond it is not stopped early, only reported at its end as a
 * timeout. */
#define PY_MAX_RUNS 256

/* PY_PROBE_MS: how long tm_pyhost_probe waits for the module's import. */
#define PY_PROBE_MS 60000

static pthread_once_t start_once = PTHREAD_ONCE_INIT;
static int start_rc = -1;
/* the interpreter runs in this process (start() succeeded) */
static atomic_int started;
/* this process only imports (tm_pyhost_probe's child): no watchdog, no
 * thread started after a fork of a process with threads */
static int probing;
static char start_err[256];
static PyObject *glue_load; /* taskmill._load */
static PyObject *glue_run;  /* taskmill._run */
static PyObject *stopped;   /* taskmill.Stopped */

/* the run of this thread, for _taskmill.log and should_stop */
static __thread struct tm_call *cur_call;
/* stop_trace is installed on this thread (by _taskmill._stopping) */
static __thread int tracing;
static const struct tm_host *log_host;

/* The runs in progress, for the watchdog. Lock order: GIL, then
 * runs_lock. A slot is used while call != NULL. */
struct py_slot {
    struct tm_call *call;
    unsigned long tid; /* PyThread_get_thread_ident() of the run */
    int signalled;     /* a Stopped was raised in it at least once */
};
static pthread_mutex_t runs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct py_slot runs[PY_MAX_RUNS];

/* ------------------------------------------------------------ _taskmill */

static PyObject *m_log(PyObject *self, PyObject *args)
{
    (void)self;
    int level;
    const char *text;
    if (!PyArg_ParseTuple(args, "is", &level, &text))
        return NULL;
    struct tm_call *call = cur_call;
    if (call != NULL)
        call->host->log(call, 1, level, "%s", text);
    else if (log_host != NULL)
        log_host->log(NULL, 0, level, "%s", text);
    Py_RETURN_NONE;
}

static PyObject *m_should_stop(PyObject *self, PyObject *args)
{
    (void)self;
    (void)args;
    struct tm_call *call = cur_call;
    return PyBool_FromLong(call != NULL && call->host->should_stop(call));
}

/* stop_trace raises Stopped at every line the thread runs: installed
 * only in a run past its deadline, so that code which catches a Stopped
 * (a bare `except:`) is stopped again in its handler, before it can loop
 * back into its `try:`. */
static int stop_trace(PyObject *obj, PyFrameObject *frame, int what,
                      PyObject *arg)
{
    (void)obj;
    (void)frame;
    (void)arg;
    if (what != PyTrace_LINE && what != PyTrace_CALL)
        return 0;
    PyErr_SetNone(stopped);
    return -1;
}

/* m_stopping is Stopped.__init__ (a C function, so that making a Stopped
 * runs no Python line stop_trace could raise in again), called in the
 * thread the Stopped is raised in when it is made: when that thread's run
 * is past its deadline, it installs stop_trace there (removed by
 * tm_pyhost_run when the run returns). The arguments stay in the
 * exception's args (BaseException.__new__ stored them). */
static PyObject *m_stopping(PyObject *self, PyObject *args)
{
    (void)self;
    (void)args;
    struct tm_call *call = cur_call;
    if (call != NULL && !tracing && call->host->should_stop(call)) {
        PyEval_SetTrace(stop_trace, NULL);
        tracing = 1;
    }
    Py_RETURN_NONE;
}

static PyMethodDef m_methods[] = {
    {"log", m_log, METH_VARARGS, "log(level, text) for the current run"},
    {"should_stop", m_should_stop, METH_NOARGS,
     "whether the current run should stop"},
    {"_stopping", m_stopping, METH_VARARGS,
     "a Stopped is being raised: keep stopping a run past its deadline"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef m_def = {PyModuleDef_HEAD_INIT, "_taskmill",
                                   NULL, -1, m_methods,
                                   NULL, NULL, NULL, NULL};

static PyObject *init_taskmill_c(void)
{
    return PyModule_Create(&m_def);
}

/* ------------------------------------------------------------- watchdog */

/* watchdog raises Stopped in runs past their deadline, between two
 * bytecodes of theirs, and again every PY_WATCH_MS until the run returns:
 * a run that catches one gets the next (and, from the first one caught
 * on, stop_trace raises it again at every line). A blocking call is not
 * cut short: in the fork pool the pool kills the child; in the thread
 * pool the run ends as a timeout when the call returns. */
static void *watchdog(void *arg)
{
    (void)arg;
    struct timespec ts = {0, PY_WATCH_MS * 1000000L};
    for (;;) {
        nanosleep(&ts, NULL);
        int due = 0;
        pthread_mutex_lock(&runs_lock);
        for (int i = 0; i < PY_MAX_RUNS; i++)
            if (runs[i].call != NULL &&
                runs[i].call->host->should_stop(runs[i].call))
                due = 1;
        pthread_mutex_unlock(&runs_lock);
        if (!due)
            continue;
        PyGILState_STATE g = PyGILState_Ensure();
        pthread_mutex_lock(&runs_lock);
        for (int i = 0; i < PY_MAX_RUNS; i++) {
            if (runs[i].call != NULL &&
                runs[i].call->host->should_stop(runs[i].call)) {
                PyThreadState_SetAsyncExc(runs[i].tid, stopped);
                runs[i].signalled = 1;
            }
        }
        pthread_mutex_unlock(&runs_lock);
        PyGILState_Release(g);
    }
    return NULL;
}

/* -------------------------------------------------------------- start */

static void start(void)
{
    PyConfig cfg;
    PyStatus st;
    Dl_info info;
    PyObject *mod = NULL, *res = NULL;

    /* extension modules (json's, yaml's, ctypes) link against libpython's
     * symbols: make them global, as they are for the python3 binary */
    if (dladdr((void *)Py_InitializeFromConfig, &info) != 0 &&
        info.dli_fname != NULL)
        dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);

    if (PyImport_AppendInittab("_taskmill", init_taskmill_c) != 0) {
        snprintf(start_err, sizeof start_err, "cannot add _taskmill");
        return;
    }
    PyConfig_InitPythonConfig(&cfg);
    cfg.install_signal_handlers = 0; /* the daemon owns the signals */
    cfg.parse_argv = 0;
    cfg.buffered_stdio = 0;
    st = Py_InitializeFromConfig(&cfg);
    PyConfig_Clear(&cfg);
    if (PyStatus_Exception(st)) {
        snprintf(start_err, sizeof start_err, "Python does not start: %s",
                 st.err_msg != NULL ? st.err_msg : "?");
        return;
    }
    mod = PyImport_AddModule("taskmill"); /* borrowed */
    PyObject *dict = mod != NULL ? PyModule_GetDict(mod) : NULL;
    if (dict != NULL) {
        PyDict_SetItemString(dict, "__builtins__", PyEval_GetBuiltins());
        res = PyRun_String(tm_pyhost_glue_source, Py_file_input, dict, dict);
    }
    if (res == NULL) {
        PyErr_Print();
        snprintf(start_err, sizeof start_err,
                 "the taskmill module does not load");
        goto out;
    }
    glue_load = PyDict_GetItemString(dict, "_load");
    glue_run = PyDict_GetItemString(dict, "_run");
    stopped = PyDict_GetItemString(dict, "Stopped");
    if (glue_load == NULL || glue_run == NULL || stopped == NULL) {
        snprintf(start_err, sizeof start_err,
                 "the taskmill module is incomplete");
        goto out;
    }
    Py_INCREF(glue_load);
    Py_INCREF(glue_run);
    Py_INCREF(stopped);
    if (probing) {
        start_rc = 0;
        goto out;
    }
    pthread_t tid;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&tid, &attr, watchdog, NULL) != 0) {
        snprintf(start_err, sizeof start_err, "no watchdog thread");
        pthread_attr_destroy(&attr);
        goto out;
    }
    pthread_attr_destroy(&attr);
    start_rc = 0;
    atomic_store(&started, 1);
out:
    Py_XDECREF(res);
    /* the interpreter lives until the process ends; let go of the GIL */
    PyEval_SaveThread();
}

int tm_pyhost_runtime_start(const struct tm_task_env *log_env)
{
    if (log_host == NULL)
        log_host = log_env->host;
    pthread_once(&start_once, start);
    if (start_rc != 0)
        tm_env_log(log_env, TM_LOG_ERR, "%s", start_err);
    return start_rc;
}

/* take_exception removes the pending exception and returns it (a new
 * reference, NULL when none); PyErr_GetRaisedException of 3.12. */
static PyObject *take_exception(void)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (type == NULL)
        return NULL;
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != NULL && tb != NULL)
        PyException_SetTraceback(value, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return value;
}

/* log_exception logs the pending exception with its traceback. */
static void log_exception(const struct tm_task_env *env, const char *what)
{
    PyObject *exc = take_exception();
    PyObject *tbm = PyImport_ImportModule("traceback");
    PyObject *lines = NULL, *sep = NULL, *text = NULL;
    if (tbm != NULL && exc != NULL)
        lines = PyObject_CallMethod(tbm, "format_exception", "O", exc);
    if (lines != NULL && (sep = PyUnicode_FromString("")) != NULL)
        text = PyUnicode_Join(sep, lines);
    const char *s = text != NULL ? PyUnicode_AsUTF8(text) : NULL;
    tm_env_log(env, TM_LOG_ERR, "%s: %s", what,
               s != NULL ? s : "(no details)");
    PyErr_Clear();
    Py_XDECREF(text);
    Py_XDECREF(sep);
    Py_XDECREF(lines);
    Py_XDECREF(tbm);
    Py_XDECREF(exc);
}

void *tm_pyhost_load(const struct tm_pyhost_task *t,
                     const struct tm_task_env *log_env)
{
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *json = PyImport_ImportModule("json");
    PyObject *paths = NULL, *fn = NULL;
    if (json != NULL)
        paths = PyObject_CallMethod(json, "loads", "s", t->paths_json);
    if (paths != NULL)
        fn = PyObject_CallFunction(glue_load, "ssO", t->module, t->function,
                                   paths);
    if (fn == NULL)
        log_exception(log_env, "cannot load the task's function");
    Py_XDECREF(paths);
    Py_XDECREF(json);
    PyGILState_Release(g);
    return fn;
}

int tm_pyhost_probe(const struct tm_pyhost_task *t,
                    const struct tm_task_env *log_env)
{
    /* an interpreter already running here (the thread pool's workers of
     * an earlier configuration) is forked with the GIL held, as os.fork
     * does, so that the child's copy is consistent */
    int held = atomic_load(&started);
    PyGILState_STATE g = PyGILState_UNLOCKED;
    if (held) {
        g = PyGILState_Ensure();
        PyOS_BeforeFork();
    }
    pid_t pid = fork();
    if (pid == 0) {
        /* the child: import, say how it went by the exit status, and end
         * without running anything inherited (atexit, stdio buffers) */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        probing = 1;
        if (held)
            PyOS_AfterFork_Child();
        else if (tm_pyhost_runtime_start(log_env) != 0)
            _exit(1);
        void *fn = tm_pyhost_load(t, log_env);
        _exit(fn != NULL ? 0 : 1);
    }
    int fork_errno = errno;
    if (held) {
        PyOS_AfterFork_Parent();
        PyGILState_Release(g);
    }
    if (pid < 0) {
        tm_env_log(log_env, TM_LOG_ERR, "cannot fork to import the module: "
                   "%s", strerror(fork_errno));
        return -1;
    }
    int status = 0;
    struct timespec tick = {0, 10 * 1000000L};
    for (long waited = 0;; waited += 10) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            break;
        if (r < 0 && errno != EINTR) {
            tm_env_log(log_env, TM_LOG_ERR, "the module's import: waitpid: "
                       "%s", strerror(errno));
            return -1;
        }
        if (waited >= PY_PROBE_MS) {
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            tm_env_log(log_env, TM_LOG_ERR, "module '%s' did not import "
                       "within %d s", t->module, PY_PROBE_MS / 1000);
            return -1;
        }
        nanosleep(&tick, NULL);
    }
    if (WIFSIGNALED(status)) {
        tm_env_log(log_env, TM_LOG_ERR, "module '%s': its import was killed "
                   "by signal %d", t->module, WTERMSIG(status));
        return -1;
    }
    /* a failure was logged by the child */
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

void tm_pyhost_unload(void *fn)
{
    if (fn == NULL)
        return;
    PyGILState_STATE g = PyGILState_Ensure();
    Py_DECREF((PyObject *)fn);
    PyGILState_Release(g);
}

/* epoch_deadline converts the call's deadline to Unix time in ms. */
static long long epoch_deadline(const struct tm_call *call)
{
    struct timespec now;
    if (call->deadline_ms <= 0)
        return 0;
    clock_gettime(CLOCK_REALTIME, &now);
    return (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000 +
           (call->deadline_ms - call->host->now_ms());
}

/* watch / unwatch register the run with the watchdog; under the GIL. */
static int watch(struct tm_call *call)
{
    int slot = -1;
    pthread_mutex_lock(&runs_lock);
    for (int i = 0; i < PY_MAX_RUNS && slot < 0; i++) {
        if (runs[i].call == NULL) {
            runs[i].call = call;
            runs[i].tid = PyThread_get_thread_ident();
            runs[i].signalled = 0;
            slot = i;
        }
    }
    pthread_mutex_unlock(&runs_lock);
    return slot;
}

static void unwatch(int slot)
{
    if (slot < 0)
        return;
    pthread_mutex_lock(&runs_lock);
    int signalled = runs[slot].signalled;
    runs[slot].call = NULL;
    pthread_mutex_unlock(&runs_lock);
    /* a Stopped raised too late for this run must not hit the next one:
     * still under the GIL, and the slot is free, so the watchdog cannot
     * set another for this thread until its next run is watched */
    if (signalled)
        PyThreadState_SetAsyncExc(PyThread_get_thread_ident(), NULL);
}

/* untrace removes stop_trace from this thread; under the GIL. */
static void untrace(void)
{
    if (tracing) {
        PyEval_SetTrace(NULL, NULL);
        tracing = 0;
    }
}

/* outcome turns _run's answer into the run's outcome. */
static int outcome(struct tm_call *call, PyObject *res)
{
    long kind = 0;
    if (res != NULL && PyTuple_Check(res) && PyTuple_Size(res) >= 2)
        kind = PyLong_AsLong(PyTuple_GetItem(res, 0));
    if (kind < 1 || kind > 4) {
        PyErr_Clear();
        tm_error(call, "the Python host failed (see the log)");
        return TM_TASK_ERROR;
    }
    PyObject *val = PyTuple_GetItem(res, 1);
    Py_ssize_t len = 0;
    const char *s = val != Py_None ? PyUnicode_AsUTF8AndSize(val, &len)
                                   : NULL;
    if (val != Py_None && s == NULL) {
        PyErr_Clear();
        tm_error(call, "the result is not UTF-8 text");
        return TM_TASK_ERROR;
    }
    switch (kind) {
    case 1:
        if (s != NULL && call->host->set_result(call, s, (size_t)len) != 0) {
            tm_error(call, "result larger than the task's max_payload");
            return TM_TASK_ERROR;
        }
        return TM_TASK_OK;
    case 3:
        tm_error(call, s);
        return TM_TASK_REJECT;
    case 2:
        if (PyTuple_Size(res) >= 3) {
            const char *tb = PyUnicode_AsUTF8(PyTuple_GetItem(res, 2));
            if (tb != NULL)
                tm_log(call, TM_LOG_WARNING, "%s", tb);
            PyErr_Clear();
        }
        tm_error(call, s);
        return TM_TASK_ERROR;
    default:
        tm_error(call, s);
        return TM_TASK_ERROR;
    }
}

int tm_pyhost_run(void *fn, struct tm_call *call)
{
    PyGILState_STATE g = PyGILState_Ensure();
    /* one run per thread at a time: the slot of this thread is free */
    assert(cur_call == NULL);
    cur_call = call;
    int slot = watch(call);
    PyObject *res = PyObject_CallFunction(
        glue_run, "Os#sILz", (PyObject *)fn, call->body,
        (Py_ssize_t)call->body_len, call->id, call->attempt,
        epoch_deadline(call), tm_traceparent(call));
    untrace();
    unwatch(slot);
    if (res == NULL) {
        /* raised outside the task's own frame (a Stopped that came
         * between two of _run's bytecodes, or no memory) */
        /* the type's C name: reading __name__ could run a metaclass's
         * code */
        PyObject *exc = take_exception();
        char msg[160];
        snprintf(msg, sizeof msg, "%s",
                 exc != NULL ? Py_TYPE(exc)->tp_name : "error");
        PyErr_Clear();
        Py_XDECREF(exc);
        tm_error(call, msg);
    }
    int rc = res != NULL ? outcome(call, res) : TM_TASK_ERROR;
    Py_XDECREF(res);
    cur_call = NULL;
    PyGILState_Release(g);
    return rc;
}
