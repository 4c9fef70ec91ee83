/*
 * error.h - how stages report failures.
 *
 * A stage returns a dcp_status and, on failure, fills a dcp__error with a
 * message naming the offending value.  The context copies it into its
 * last-error text.  dcp__fail() formats and returns the status, so a failure
 * site is one line:  return dcp__fail(err, DCP_ERR_BAD_LENGTH, "length %d ...", s);
 */
#ifndef DCP_ERROR_H
#define DCP_ERROR_H

#include "dcpack.h"

/*
 * Room for the longest message a call composes: an agreement's prefix, the
 * communicator's reason and this rank's own message inside it.  A message
 * longer than this still ends on a whole word, marked "..." (dcp__fail).
 */
#define DCP_ERROR_MESSAGE_SIZE 512

typedef struct dcp__error {
    char message[DCP_ERROR_MESSAGE_SIZE];
} dcp__error;

#if defined(__GNUC__) || defined(__clang__)
#define DCP_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define DCP_PRINTF(fmt, args)
#endif

/*
 * Record a message (may be NULL err) and return `status`.  A message that
 * does not fit is cut after its last whole word and ends in "...", never
 * in the middle of a word or a number.
 */
dcp_status dcp__fail(dcp__error *err, dcp_status status, const char *format, ...) DCP_PRINTF(3, 4);

/* Cut `message`, which filled `size` bytes, after its last whole word and end it in "...". */
void dcp__message_cut(char *message, size_t size);

/*
 * The last-error recorder: copy a failure into a caller's last-error text
 * (a context's), or the status name when the failure carried no message.
 * Returns `status`; DCP_OK records nothing.
 */
dcp_status dcp__error_record(dcp__error *last, dcp_status status, const dcp__error *err);

/* Clear the message. */
static inline void dcp__error_clear(dcp__error *err)
{
    if (err) err->message[0] = '\0';
}

#endif
