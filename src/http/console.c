/* console.c - serves the console page and its assets (GET /,
 * /console.css, /console.js) from the copies compiled into the binary. */
#include "http/console_private.h"
#include "http/http_private.h"

#include <string.h>

#include <microhttpd.h>

/* find returns the asset served at url, or NULL. */
static const struct tm_console_asset *find(const char *url)
{
    for (size_t i = 0; i < tm_console_nassets; i++)
        if (strcmp(url, tm_console_assets[i].path) == 0)
            return &tm_console_assets[i];
    return NULL;
}

int tm_http_console_path(const char *url)
{
    return find(url) != NULL;
}

enum MHD_Result tm_http_console_answer(struct MHD_Connection *conn,
                                       const char *url, const char *method,
                                       size_t *upload_data_size,
                                       void **req_cls, int *queued)
{
    const struct tm_console_asset *a = find(url);
    int get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    *queued = 0;
    if (get && *req_cls == NULL) {
        /* answer once the request is complete, so that the connection
         * can be kept alive */
        *req_cls = tm_http_seen_marker();
        return MHD_YES;
    }
    if (get && *upload_data_size != 0) {
        *upload_data_size = 0; /* a GET body is ignored */
        return MHD_YES;
    }
    static const char refused[] = "{\"error\":\"method not allowed\"}\n";
    struct MHD_Response *resp =
        get ? MHD_create_response_from_buffer(a->len, (void *)a->data,
                                              MHD_RESPMEM_PERSISTENT)
            : MHD_create_response_from_buffer(sizeof refused - 1,
                                              (void *)refused,
                                              MHD_RESPMEM_PERSISTENT);
    if (resp == NULL)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            get ? a->type : "application/json");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    if (!get)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    tm_http_secure_headers(resp);
    enum MHD_Result ret = MHD_queue_response(conn, get ? 200 : 405, resp);
    MHD_destroy_response(resp);
    *queued = ret == MHD_YES;
    return ret;
}
