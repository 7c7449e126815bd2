/* pin.c - an object a thread of the HTTP server uses without gen_lock
 * (struct tm_http_pin, see http_private.h). */
#include "http/http_private.h"

#include <assert.h>

void tm_http_pin_set(struct tm_http_pin *p, const void *obj)
{
    assert(obj != NULL);
    pthread_mutex_lock(&p->mu);
    /* one user thread per pin, which drops an object before the next */
    assert(p->in_use == NULL);
    p->in_use = obj;
    pthread_mutex_unlock(&p->mu);
}

void tm_http_pin_drop(struct tm_http_pin *p)
{
    pthread_mutex_lock(&p->mu);
    p->in_use = NULL;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void tm_http_pin_wait(struct tm_http_pin *p, const void *obj)
{
    pthread_mutex_lock(&p->mu);
    while (obj != NULL && p->in_use == obj)
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
