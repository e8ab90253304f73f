-- Golden test of the SQL surface (docs/sql.md): run by golden.sh on a fresh
-- database with the extension loaded; the output must equal golden.expected.
-- Times come from tocsin_clock(ms), so every value printed is deterministic.
.bail off
.headers off
.mode list
SELECT '-- setup';
SELECT tocsin_bootstrap();
SELECT tocsin_version() = (SELECT tocsin_version());
SELECT tocsin_clock(1000000);
SELECT tocsin_clock();

SELECT '-- enqueue';
SELECT tocsin_enqueue('emails', '{"to":"a@example.com"}');
SELECT tocsin_enqueue('emails', '{"to":"b@example.com"}', '{"priority":5,"max_attempts":2,"meta":{"trace":"t1"}}');
SELECT tocsin_enqueue('emails', '{"to":"c@example.com"}', '{"delay_ms":60000}');
SELECT tocsin_enqueue('emails', '"d"', '{"unique_key":"user-7"}');
SELECT tocsin_enqueue('emails', '"d again"', '{"unique_key":"user-7"}');
SELECT tocsin_enqueue('emails', '[1,2]', '{"run_at_ms":999000,"expires_ms":5000}');
SELECT tocsin_enqueue('emails', '42', NULL);
SELECT tocsin_stats('emails');

SELECT '-- enqueue errors';
SELECT tocsin_enqueue('emails', '{bad json');
SELECT tocsin_enqueue('', '1');
SELECT tocsin_enqueue(NULL, '1');
SELECT tocsin_enqueue('emails', '1', '{"priorty":1}');
SELECT tocsin_enqueue('emails', '1', '{"max_attempts":0}');
SELECT tocsin_enqueue('emails', '1', '{"delay_ms":"soon"}');
SELECT tocsin_enqueue('emails', '1', '[1]');
SELECT tocsin_enqueue('emails', '1', '{"delay_ms":10,"run_at_ms":10}');
SELECT tocsin_enqueue('emails', '1', '{"meta":[1]}');
SELECT count(*) FROM _tocsin_jobs;

SELECT '-- claim';
SELECT tocsin_claim('emails', 'w1', 2, 30000);
SELECT tocsin_claim('emails', 'w1', 0, 30000);
SELECT tocsin_claim('emails', 'w1', 1, 0);
SELECT tocsin_job(2);
SELECT tocsin_job(424242) IS NULL;

SELECT '-- ack, heartbeat, retry, fail';
SELECT tocsin_ack(2, 1);
SELECT tocsin_ack(2, 1);
SELECT tocsin_heartbeat(6, 1, 60000);
SELECT tocsin_heartbeat(6, 7, 60000);
SELECT json_extract(tocsin_job(6), '$.lease_until');
SELECT tocsin_retry(6, 1, 20000, 'smtp timeout');
SELECT json_extract(tocsin_job(6), '$.state', '$.run_at', '$.last_error', '$.attempts');
SELECT tocsin_retry(6, 1);
SELECT tocsin_clock(1001000);
SELECT tocsin_claim('emails', 'w2', 10, 30000);
SELECT tocsin_fail(4, 1, 'bad address');
SELECT tocsin_fail(4, 1, 'again');
SELECT tocsin_ack(1, 1);
SELECT tocsin_ack(1, 2);

SELECT '-- lapsed lease and expiry';
SELECT tocsin_enqueue('lapse', '"x"', '{"max_attempts":1}');
SELECT json_extract(tocsin_claim('lapse', 'w3', 1, 100), '$[0].token');
SELECT tocsin_clock(1002000);
SELECT tocsin_claim('lapse', 'w4', 1, 100);
SELECT json_extract(tocsin_job(8), '$.state', '$.reason', '$.last_error');
SELECT tocsin_clock(1010000);
SELECT tocsin_next_deadline('emails');
SELECT tocsin_claim('emails', 'w5', 10, 30000);
SELECT json_extract(tocsin_job(6), '$.state', '$.reason');

SELECT '-- cancel, pause, stats, next deadline';
SELECT tocsin_enqueue('jobs', '{}');
SELECT tocsin_cancel(9);
SELECT tocsin_cancel(9);
SELECT tocsin_enqueue('jobs', '{"n":1}', '{"delay_ms":5000}');
SELECT tocsin_next_deadline('jobs', 'emails');
SELECT tocsin_pause('jobs');
SELECT tocsin_clock(1020000);
SELECT tocsin_claim('jobs', 'w6', 1, 1000);
SELECT tocsin_next_deadline('jobs');
SELECT tocsin_resume('jobs');
SELECT tocsin_next_deadline('jobs');
SELECT tocsin_stats();
SELECT tocsin_next_deadline('nothing') IS NULL;

SELECT '-- dead letters';
SELECT tocsin_dead_list();
SELECT tocsin_dead_list('emails', 0, 1);
SELECT tocsin_dead_requeue(4);
SELECT tocsin_dead_requeue(4);
SELECT json_extract(tocsin_job(4), '$.state', '$.attempts', '$.run_at');
SELECT tocsin_dead_purge('jobs');
SELECT tocsin_dead_purge(NULL, 1005000);
SELECT tocsin_dead_purge();
SELECT tocsin_dead_list();

SELECT '-- transactions';
BEGIN;
SELECT tocsin_enqueue('tx', '1');
SELECT tocsin_notify('tx', '1');
SELECT tocsin_stream_publish('tx', '1');
ROLLBACK;
SELECT (SELECT count(*) FROM _tocsin_jobs WHERE queue = 'tx'), (SELECT count(*) FROM _tocsin_notifications), (SELECT count(*) FROM _tocsin_events);

SELECT '-- notify';
SELECT tocsin_notify('orders', '{"id":1}');
SELECT tocsin_notify('orders', '{"id":2}', '{"source":"web"}');
SELECT tocsin_notify('other', 'true');
SELECT tocsin_notify_read('orders', 0, 10);
SELECT tocsin_notify_read('orders', 1, 10);
SELECT tocsin_clock(1030000);
SELECT tocsin_notify('orders', '{"id":3}');
SELECT tocsin_notify_prune(5000);
SELECT tocsin_notify_prune(NULL, 1);
SELECT tocsin_notify_read('orders', 0, 10);
SELECT tocsin_notify_autotrim(0, 1, 1);
SELECT value FROM _tocsin_meta WHERE key = 'notify_autotrim';
SELECT tocsin_notify('orders', '{"id":4}');
SELECT count(*) FROM _tocsin_notifications WHERE channel = 'orders';
SELECT tocsin_notify_autotrim(0, 0, 0);
SELECT count(*) FROM _tocsin_meta WHERE key = 'notify_autotrim';
SELECT tocsin_notify_read('orders', 0, 0);
SELECT tocsin_notify('orders', 'nope');

SELECT '-- streams';
SELECT tocsin_stream_publish('clicks', '{"page":"/"}');
SELECT tocsin_stream_publish('clicks', '{"page":"/a"}', 'user-1');
SELECT tocsin_stream_publish('clicks', '{"page":"/b"}', 'user-2', '{"v":1}');
SELECT tocsin_stream_read('clicks', 0, 2);
SELECT tocsin_stream_read('clicks', 2, 100);
SELECT tocsin_stream_offset('billing', 'clicks');
SELECT tocsin_stream_save_offset('billing', 'clicks', 2);
SELECT tocsin_stream_save_offset('billing', 'clicks', 1);
SELECT tocsin_stream_offset('billing', 'clicks');
SELECT tocsin_stream_trim('clicks', '{"below_consumers":true}');
SELECT tocsin_stream_trim('clicks', '{"max_count":5}');
SELECT tocsin_clock(1040000);
SELECT tocsin_stream_publish('clicks', '{"page":"/c"}');
SELECT tocsin_stream_trim('clicks', '{"max_age_ms":5000}');
SELECT tocsin_stream_read('clicks', 0, 100);
SELECT tocsin_stream_trim('clicks', '{}');
SELECT tocsin_stream_trim('clicks', '{"max_count":"x"}');
SELECT tocsin_stream_save_offset('billing', 'clicks', -1);

SELECT '-- results, locks, rate limits, cron, schedules';
SELECT tocsin_clock(2000000);
SELECT tocsin_result_save(41, '{"sent":true}', 60000);
SELECT tocsin_result_save(42, 'null');
SELECT tocsin_result_save_error(43, 'ValueError', 'bad address');
SELECT tocsin_result_get(41);
SELECT tocsin_result_get(42);
SELECT tocsin_result_get(43);
SELECT tocsin_result_get(44) IS NULL;
SELECT tocsin_clock(2060000);
SELECT tocsin_result_get(41) IS NULL, tocsin_result_sweep();
SELECT tocsin_lock_acquire('report', 'A', 10000);
SELECT tocsin_lock_acquire('report', 'B', 10000) IS NULL;
SELECT tocsin_lock_renew('report', 'A', 1, 10000);
SELECT tocsin_lock_release('report', 'A', 1);
SELECT tocsin_lock_acquire('report', 'B', 10000);
SELECT tocsin_lock_holder('report');
SELECT tocsin_ratelimit_try('api', 2, 1000);
SELECT tocsin_ratelimit_try('api', 2, 1000);
SELECT tocsin_ratelimit_try('api', 2, 1000);
SELECT tocsin_cron_next('*/15 9-17 * * MON-FRI', 0);
SELECT tocsin_cron_next('@every 90s', 2060000);
SELECT tocsin_cron_next('61 * * * *', 0);
SELECT tocsin_schedule_set('nightly', '0 3 * * *', 'reports', '{"kind":"nightly"}');
SELECT json_extract(tocsin_schedule_get('nightly'), '$.next_fire');
SELECT tocsin_clock(86400000 + 3 * 3600000);
SELECT tocsin_scheduler_tick();
SELECT tocsin_scheduler_tick();
SELECT json_extract(value, '$.payload') FROM json_each(tocsin_claim('reports', 'w', 5, 1000));
SELECT tocsin_schedule_remove('nightly'), tocsin_schedule_remove('nightly');

SELECT '-- argument types and SQLITE_DIRECTONLY';
SELECT tocsin_ack('x', 1);
SELECT tocsin_ack(1.5, 1);
SELECT tocsin_ack(2.0, 1);
SELECT tocsin_claim(x'00', 'w', 1, 1);
SELECT tocsin_clock(-1);
CREATE TABLE audit(x);
CREATE TRIGGER audit_job AFTER INSERT ON audit BEGIN SELECT tocsin_enqueue('t', '1'); END;
INSERT INTO audit VALUES (1);
CREATE VIEW v_stats AS SELECT tocsin_stats() AS s;
SELECT * FROM v_stats;
SELECT tocsin_clock(NULL) > 1000000000000;
