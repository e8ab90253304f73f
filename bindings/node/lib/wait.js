'use strict';
// Event-loop waits: every wait handle of the core has a pollable descriptor;
// libuv polls it (uv_poll, no thread per waiter) and the non-blocking call
// (timeout 0) is made when it is readable. Deadlines that carry meaning come
// from the core (next deadline, lease end) and arm a timer.
const { native } = require('./native');
const { errorOf } = require('./errors');

function abortReason(signal) {
  if (signal.reason !== undefined) return signal.reason;
  const e = new Error('The operation was aborted');
  e.name = 'AbortError';
  e.code = 'ABORT_ERR';
  return e;
}

function checkSignal(signal) {
  if (signal === undefined || signal === null) return;
  if (typeof signal !== 'object' || typeof signal.aborted !== 'boolean' || typeof signal.addEventListener !== 'function') {
    throw errorOf('TOCSIN_INVALID', 'signal must be an AbortSignal');
  }
}

function checkTimeout(timeout) {
  if (timeout === undefined || timeout === null) return;
  if (typeof timeout === 'bigint' && timeout >= 0n) return; // an integer may be a BigInt
  if (typeof timeout !== 'number' || !Number.isFinite(timeout) || timeout < 0) {
    throw errorOf('TOCSIN_INVALID', 'timeout must be a number of milliseconds >= 0');
  }
}

// Timers longer than this are re-armed (setTimeout's limit is 2^31-1 ms).
const MAX_TIMER = 2147483647;

/**
 * Waits until `attempt()` gives a value other than undefined.
 *  fd:        the descriptor to poll
 *  drain():   consumes the pending wake (called when fd is readable, before attempt)
 *  attempt(): a value (done), undefined (not yet); may return a Promise; may throw
 *  recheck(): optional, ms until attempt() should run again without a wake (null: none)
 *  timeout:   ms (TimeoutError after it); signal: AbortSignal
 *  atDeadline(): optional, the last check once the timeout has passed, in place of
 *             attempt(): its value ends the wait, its TimeoutError says why
 *  owner:     the Database (its close() ends the wait with ClosedError)
 *  holder:    the object owning fd (a listener...): its close() ends the wait
 *             first, so that no descriptor is polled after it is closed
 *  cleanup(): called once when the wait ends
 */
function waitFor({ fd, drain, attempt, atDeadline, recheck, timeout, signal, owner, holder, cleanup }) {
  checkSignal(signal);
  checkTimeout(timeout);
  if (typeof timeout === 'bigint') timeout = Number(timeout);
  return new Promise((resolve, reject) => {
    let done = false;
    let running = false;
    let again = false;
    let poller = null;
    let timeoutTimer = null;
    let recheckTimer = null;
    let cleanupLater = false;
    let timedOut = false; // the timeout passed: the next step is atDeadline()
    const entry = { cancel: (err) => finish(err) };
    function runCleanup() {
      try { if (cleanup) cleanup(); } catch (_) { /* cleanup of a finished wait */ }
    }

    function finish(err, value) {
      if (done) return;
      done = true;
      if (poller) poller.close();
      if (timeoutTimer) clearTimeout(timeoutTimer);
      if (recheckTimer) clearTimeout(recheckTimer);
      if (signal) signal.removeEventListener('abort', onAbort);
      if (owner) owner._waits.delete(entry);
      if (holder) holder._waits.delete(entry);
      // a step running on the pool still uses the wait's subscription: clean up after it
      if (running) cleanupLater = true;
      else runCleanup();
      if (err) reject(err); else resolve(value);
    }
    function onAbort() { finish(abortReason(signal)); }
    function armRecheck() {
      if (!recheck || done) return;
      let ms;
      try { ms = recheck(); } catch (e) { finish(e); return; }
      if (ms === null || ms === undefined || ms < 0) return;
      if (recheckTimer) clearTimeout(recheckTimer);
      recheckTimer = setTimeout(run, Math.min(Math.max(0, ms), MAX_TIMER));
    }
    async function run() {
      if (done) return;
      if (running) { again = true; return; }
      running = true;
      if (poller) poller.stop(); // level-triggered: no callbacks while a step runs
      try {
        do {
          again = false;
          const last = timedOut;
          let v = last ? atDeadline() : attempt();
          if (v && typeof v.then === 'function') v = await v;
          if (done) return;
          if (v !== undefined) { finish(null, v); return; }
          if (last) { finish(timeoutError()); return; }
        } while ((again || timedOut) && !done);
        armRecheck();
      } catch (e) {
        finish(e);
      } finally {
        running = false;
        if (cleanupLater) { cleanupLater = false; runCleanup(); }
        if (!done && poller) poller.start();
      }
    }
    function timeoutError() { return errorOf('TOCSIN_TIMEOUT', `the wait timed out after ${timeout} ms`); }
    function onTimeout() {
      if (done) return;
      if (!atDeadline) { finish(timeoutError()); return; }
      timedOut = true; // a step under way runs it when it ends
      if (!running) run();
    }
    function onReadable() {
      if (done) return;
      try { if (drain) drain(); } catch (e) { finish(e); return; }
      run();
    }

    if (signal && signal.aborted) { finish(abortReason(signal)); return; }
    if (owner) {
      if (owner._closing) { finish(errorOf('TOCSIN_CLOSED', 'the database is closed')); return; }
      owner._waits.add(entry);
    }
    if (holder) holder._waits.add(entry);
    if (signal) signal.addEventListener('abort', onAbort, { once: true });
    if (timeout !== undefined && timeout !== null) {
      // a timer past setTimeout's limit is re-armed for what is left
      const end = Date.now() + timeout;
      const arm = () => {
        const left = end - Date.now();
        if (left > MAX_TIMER) timeoutTimer = setTimeout(arm, MAX_TIMER);
        else timeoutTimer = setTimeout(onTimeout, Math.max(0, left));
      };
      arm();
    }
    try {
      poller = new native.Poller(fd, onReadable);
      poller.start();
    } catch (e) { finish(e); return; }
    run();
  });
}

module.exports = { waitFor, checkSignal, checkTimeout, abortReason };
