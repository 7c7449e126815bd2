/* oldminor.c - test plugin: a descriptor that ends at cb_run, as one
 * built against an older minor would; the spare slots behind it hold
 * junk the loader must not copy. */
#include <stddef.h>

#include <taskmill.h>

static int cb_run(struct tm_call *call)
{
    (void)call;
    return TM_TASK_OK;
}

#define OLD_SIZE \
    (offsetof(struct tm_task_plugin, cb_run) + sizeof(int (*)(void *)))

TM_TASK_EXPORT const struct tm_task_plugin *tm_task_descriptor(void);
TM_TASK_EXPORT const struct tm_task_plugin *tm_task_descriptor(void)
{
    static const struct tm_task_plugin desc = {
        .struct_size = (uint32_t)OLD_SIZE,
        .magic = TM_TASK_MAGIC,
        .abi_major = TM_TASK_ABI_MAJOR,
        .abi_minor = 0,
        .signature = TM_TASK_SIGNATURE,
        .name = "test-oldminor",
        .version = "0.0.1",
        .cb_run = cb_run,
        .spare = {(void *)&desc, (void *)&desc},
    };
    return &desc;
}
