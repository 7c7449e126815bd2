/* newminor.c - test plugin: a descriptor from a newer minor ABI, larger
 * than the daemon's struct; the loader reads the part it knows. */
#include <taskmill.h>

static int cb_run(struct tm_call *call)
{
    (void)call;
    return TM_TASK_OK;
}

struct newer_descriptor {
    struct tm_task_plugin base;
    void *added_later[4];
};

TM_TASK_EXPORT const struct tm_task_plugin *tm_task_descriptor(void);
TM_TASK_EXPORT const struct tm_task_plugin *tm_task_descriptor(void)
{
    static const struct newer_descriptor desc = {
        .base = {
            .struct_size = (uint32_t)sizeof(struct newer_descriptor),
            .magic = TM_TASK_MAGIC,
            .abi_major = TM_TASK_ABI_MAJOR,
            .abi_minor = TM_TASK_ABI_MINOR + 1,
            .signature = TM_TASK_SIGNATURE,
            .name = "test-newminor",
            .version = "0.0.1",
            .cb_run = cb_run,
        },
    };
    return &desc.base;
}
