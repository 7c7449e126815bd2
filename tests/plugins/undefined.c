/* undefined.c - test plugin: needs a symbol nothing defines, so
 * dlopen(RTLD_NOW) fails. */
#include <taskmill.h>

/* Defined nowhere; -shared links it as an unresolved dynamic symbol. */
extern int tm_test_symbol_defined_nowhere(int x);

static int cb_run(struct tm_call *call)
{
    return tm_test_symbol_defined_nowhere((int)call->attempt) == 0
               ? TM_TASK_OK
               : TM_TASK_ERROR;
}

TM_TASK_DECLARE(
    .name = "test-undefined",
    .version = "0.0.1",
    .cb_run = cb_run,
)
