/* amqp/rmq_dl.c - rabbitmq-c opened on first need (see rmq_dl.h). */
#include "amqp/rmq_dl_private.h"

TM_RMQ_FUNCS(TM_DLSYM_STORAGE)

static const struct tm_dlsym rmq_syms[] = {
    TM_RMQ_FUNCS(TM_DLSYM_ROW)
};

static struct tm_dlib rmq_lib = {
    .soname = "librabbitmq.so.4",
    .package = "librabbitmq4",
    .syms = rmq_syms,
    .nsyms = sizeof rmq_syms / sizeof rmq_syms[0],
};

int tm_rmq_dl_open(char *err, size_t errlen)
{
    return tm_dlib_open(&rmq_lib, err, errlen);
}
