/*
 * err.c — sx_strerror, generated from the one error list in sx_errors.h.
 */
#include "sx_errors.h"

const char *sx_strerror(int err)
{
    switch (err) {
#define SX__ERR_CASE(name, num, msg) \
    case num: return msg;
        SX_ERRORS(SX__ERR_CASE)
#undef SX__ERR_CASE
    default: return "unknown error";
    }
}
