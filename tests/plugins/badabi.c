/* badabi.c - test plugin: an ABI major one above the daemon's. */
#include <taskmill.h>

static int cb_run(struct tm_call *call)
{
    (void)call;
    return TM_TASK_OK;
}

/* Written by hand: TM_TASK_DECLARE stamps the current ABI. */
TM_TASK_EXPORT const struct tm_task_plugin *tm_task_descriptor(void);
TM_TASK_EXPORT const struct tm_task_plugin *tm_task_descriptor(void)
{
    static const struct tm_task_plugin desc = {
        .struct_size = (uint32_t)sizeof(struct tm_task_plugin),
        .magic = TM_TASK_MAGIC,
        .abi_major = TM_TASK_ABI_MAJOR + 1,
        .abi_minor = 0,
        .signature = TM_TASK_SIGNATURE,
        .name = "test-badabi",
        .version = "0.0.1",
        .cb_run = cb_run,
    };
    return &desc;
}
