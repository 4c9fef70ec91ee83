/* status.c - status names and error messages. */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *dcp_status_str(dcp_status status)
{
    switch (status) {
    case DCP_OK: return "DCP_OK";
    case DCP_ERR_NULL_POINTER: return "DCP_ERR_NULL_POINTER";
    case DCP_ERR_INVALID_ARGUMENT: return "DCP_ERR_INVALID_ARGUMENT";
    case DCP_ERR_INVALID_CONFIG: return "DCP_ERR_INVALID_CONFIG";
    case DCP_ERR_OVERFLOW: return "DCP_ERR_OVERFLOW";
    case DCP_ERR_WORKSPACE_TOO_SMALL: return "DCP_ERR_WORKSPACE_TOO_SMALL";
    case DCP_ERR_CAPACITY: return "DCP_ERR_CAPACITY";
    case DCP_ERR_BAD_LENGTH: return "DCP_ERR_BAD_LENGTH";
    case DCP_ERR_INFEASIBLE: return "DCP_ERR_INFEASIBLE";
    case DCP_ERR_INVALID_PLAN: return "DCP_ERR_INVALID_PLAN";
    case DCP_ERR_CORRUPT_INPUT: return "DCP_ERR_CORRUPT_INPUT";
    case DCP_ERR_FIELD_MISMATCH: return "DCP_ERR_FIELD_MISMATCH";
    case DCP_ERR_COMM: return "DCP_ERR_COMM";
    case DCP_ERR_TIMEOUT: return "DCP_ERR_TIMEOUT";
    case DCP_ERR_ALLOC: return "DCP_ERR_ALLOC";
    case DCP_ERR_CUDA: return "DCP_ERR_CUDA";
    case DCP_ERR_NCCL: return "DCP_ERR_NCCL";
    case DCP_ERR_UNSUPPORTED: return "DCP_ERR_UNSUPPORTED";
    case DCP_ERR_OUT_OF_STEP: return "DCP_ERR_OUT_OF_STEP";
    }
    return "DCP_ERR_UNKNOWN";
}

void dcp__message_cut(char *message, size_t size)
{
    static const char mark[] = "...";
    if (size < sizeof mark + 1) return;
    /* room for the mark, then back to the end of the last whole word before it */
    size_t end = size - sizeof mark;
    if (message[end] != ' ')
        while (end > 0 && message[end - 1] != ' ') end--;
    while (end > 0 && message[end - 1] == ' ') end--;
    if (end == 0) end = size - sizeof mark; /* one word longer than the buffer: cut it */
    memcpy(message + end, mark, sizeof mark);
}

dcp_status dcp__fail(dcp__error *err, dcp_status status, const char *format, ...)
{
    if (err) {
        va_list args;
        va_start(args, format);
        int n = vsnprintf(err->message, sizeof err->message, format, args);
        va_end(args);
        if (n >= (int)sizeof err->message) dcp__message_cut(err->message, sizeof err->message);
    }
    return status;
}

dcp_status dcp__error_record(dcp__error *last, dcp_status status, const dcp__error *err)
{
    if (last && status != DCP_OK) {
        if (err && err->message[0]) memcpy(last, err, sizeof *err);
        else dcp__fail(last, status, "%s", dcp_status_str(status));
    }
    return status;
}
