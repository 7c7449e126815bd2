/* small.c - test plugin: struct_size too small to reach cb_run. */
#include <stddef.h>

#include <taskmill.h>

static int cb_run(struct tm_call *call)
{
    (void)call;
    return TM_TASK_OK;
}

/* Claims to end right after the name, as a truncated descriptor would. */
#define SMALL_SIZE offsetof(struct tm_task_plugin, version)

TM_TASK_EXPORT const struct tm_task_plugin *tm_task_descriptor(void);
TM_TASK_EXPORT const struct tm_task_plugin *tm_task_descriptor(void)
{
    static const struct tm_task_plugin desc = {
        .struct_size = (uint32_t)SMALL_SIZE,
        .magic = TM_TASK_MAGIC,
        .abi_major = TM_TASK_ABI_MAJOR,
        .abi_minor = TM_TASK_ABI_MINOR,
        .signature = TM_TASK_SIGNATURE,
        .name = "test-small",
        .version = "0.0.1",
        .cb_run = cb_run,
    };
    return &desc;
}
