/* badmagic.c - test plugin: a descriptor with the wrong magic number. */
#include <taskmill.h>

static int cb_run(struct tm_call *call)
{
    (void)call;
    return TM_TASK_OK;
}

TM_TASK_EXPORT const struct tm_task_plugin *tm_task_descriptor(void);
TM_TASK_EXPORT const struct tm_task_plugin *tm_task_descriptor(void)
{
    static const struct tm_task_plugin desc = {
        .struct_size = (uint32_t)sizeof(struct tm_task_plugin),
        .magic = 0xdeadbeefu,
        .abi_major = TM_TASK_ABI_MAJOR,
        .abi_minor = TM_TASK_ABI_MINOR,
        .signature = TM_TASK_SIGNATURE,
        .name = "test-badmagic",
        .version = "0.0.1",
        .cb_run = cb_run,
    };
    return &desc;
}
