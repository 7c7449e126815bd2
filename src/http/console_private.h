/* console_private.h - the console's files (src/console/), compiled into the
 * binary by scripts/embed-console.sh, and their serving. Not installed. */
#ifndef TASKMILL_HTTP_CONSOLE_H
#define TASKMILL_HTTP_CONSOLE_H

#include <stddef.h>

/* struct tm_console_asset is one file of the console. data holds len
 * bytes (and a NUL past them). */
struct tm_console_asset {
    const char *path;          /* "/" for index.html, else "/NAME" */
    const char *type;          /* Content-Type */
    const unsigned char *data;
    size_t len;
};

extern const struct tm_console_asset tm_console_assets[];
extern const size_t tm_console_nassets;

#endif /* TASKMILL_HTTP_CONSOLE_H */
