/* http.h - the HTTP server as the daemon sees it: started once the first
 * generation is published, stopped before the last one is freed. What
 * the server's own files share is in http_private.h. Not installed. */
#ifndef TASKMILL_HTTP_H
#define TASKMILL_HTTP_H

#include <stddef.h>

struct tm_daemon;
struct tm_http;

/* tm_http_start serves d's endpoints on the published configuration's
 * http.listen. Returns NULL with a reason in err when the address cannot
 * be bound. */
struct tm_http *tm_http_start(struct tm_daemon *d, char *err, size_t errlen);

/* tm_http_stop stops the server and joins its threads (the server
 * thread, the queue depth refresher, the admin API worker): once it
 * returns, none of them holds a reference to a generation. NULL is
 * accepted. */
void tm_http_stop(struct tm_http *h);

#endif /* TASKMILL_HTTP_H */
