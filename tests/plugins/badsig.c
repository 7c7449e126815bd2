/* badsig.c - test plugin: a build signature that does not match. */
#include <taskmill.h>

static int cb_run(struct tm_call *call)
{
    (void)call;
    return TM_TASK_OK;
}

/* As if built for 4-byte pointers and size_t. */
TM_TASK_EXPORT const struct tm_task_plugin *tm_task_descriptor(void);
TM_TASK_EXPORT const struct tm_task_plugin *tm_task_descriptor(void)
{
    static const struct tm_task_plugin desc = {
        .struct_size = (uint32_t)sizeof(struct tm_task_plugin),
        .magic = TM_TASK_MAGIC,
        .abi_major = TM_TASK_ABI_MAJOR,
        .abi_minor = TM_TASK_ABI_MINOR,
        .signature = (4u << 8) | 4u,
        .name = "test-badsig",
        .version = "0.0.1",
        .cb_run = cb_run,
    };
    return &desc;
}
