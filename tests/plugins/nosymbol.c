/* nosymbol.c - test plugin: a shared object without a descriptor. */
#include <taskmill.h>

/* Something exported, but not TM_TASK_SYMBOL. */
TM_TASK_EXPORT int tm_test_not_a_plugin(void);
TM_TASK_EXPORT int tm_test_not_a_plugin(void)
{
    return 42;
}
