/* nulldesc.c - test plugin: the descriptor function returns NULL. */
#include <taskmill.h>

TM_TASK_EXPORT const struct tm_task_plugin *tm_task_descriptor(void);
TM_TASK_EXPORT const struct tm_task_plugin *tm_task_descriptor(void)
{
    return NULL;
}
