// Round trips through memjs, the common Node.js memcached client, which speaks
// only the binary protocol.  Run with `node --test` by scripts/conformance.sh
// against the server named by MC_HOST / MC_PORT (cachalot, or memcached 1.6
// with TARGET_SERVER=memcached, against which these were written first).
//
// memjs has no cas, getMulti or version calls, so those go through the
// client's own request path (`perform`) with hand-built binary requests: they
// still travel over memjs's connection and response parser.

'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const memjs = require('memjs');

const HOST = process.env.MC_HOST || '127.0.0.1';
const PORT = process.env.MC_PORT;
if (!PORT) {
  // Refuse to guess a port: the tests must hit the server the script started.
  throw new Error('MC_PORT is not set: run via scripts/conformance.sh');
}

// memjs logs every non-success status; the tests check those themselves.
const quiet = { log() {} };

// A serializer that keeps the item flags visible: serialize takes {value,
// flags}, deserialize returns them, so tests can check flags round trips.
const flagSerializer = {
  serialize(opcode, value, extras) {
    if (value && typeof value === 'object' && !Buffer.isBuffer(value) && 'flags' in value) {
      const ex = Buffer.from(extras);
      ex.writeUInt32BE(value.flags >>> 0, 0);
      return { value: value.value, extras: ex };
    }
    return { value, extras };
  },
  deserialize(opcode, value, extras) {
    return { value, extras };
  },
};

let client;
let flagClient;

before(() => {
  const opts = { retries: 1, timeout: 5, logger: quiet };
  client = memjs.Client.create(`${HOST}:${PORT}`, opts);
  flagClient = memjs.Client.create(`${HOST}:${PORT}`, { ...opts, serializer: flagSerializer });
});

after(() => {
  client.close();
  flagClient.close();
});

function key(name) {
  // Unique per run so tests never see each other's items.
  return `node_${crypto.randomBytes(6).toString('hex')}_${name}`;
}

// Send one hand-built binary request over memjs's connection; resolves with
// memjs's parsed response ({header, key, extras, val}).
function raw(opcode, k, { extras = Buffer.alloc(0), value = Buffer.alloc(0), cas } = {}) {
  client.incrSeq();
  const keyBuf = Buffer.from(k);
  const req = Buffer.alloc(24 + extras.length + keyBuf.length + value.length);
  memjs.Header.toBuffer({
    magic: 0x80,
    opcode,
    keyLength: keyBuf.length,
    extrasLength: extras.length,
    totalBodyLength: extras.length + keyBuf.length + value.length,
    opaque: client.seq,
    cas,
  }).copy(req);
  extras.copy(req, 24);
  keyBuf.copy(req, 24 + extras.length);
  value.copy(req, 24 + extras.length + keyBuf.length);
  return new Promise((resolve, reject) => {
    client.perform(k, req, client.seq, (err, res) => (err ? reject(err) : resolve(res)));
  });
}

test('set, get, overwrite, missing', async () => {
  const k = key('a');
  assert.deepEqual(await client.get(k), { value: null, flags: null });
  assert.equal(await client.set(k, 'hello'), true);
  const got = await client.get(k);
  assert.ok(Buffer.isBuffer(got.value));
  assert.equal(got.value.toString(), 'hello');
  assert.equal(await client.set(k, ''), true);
  assert.equal((await client.get(k)).value.length, 0);
  const bin = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
  assert.equal(await client.set(k, bin), true);
  assert.deepEqual((await client.get(k)).value, bin);
});

test('flags round trip through the binary extras', async () => {
  for (const flags of [0, 1, 0xdeadbeef, 0xffffffff]) {
    const k = key(`f${flags}`);
    assert.equal(await flagClient.set(k, { value: 'v', flags }), true);
    const { value, flags: extras } = await flagClient.get(k);
    assert.equal(value.toString(), 'v');
    // A get response carries exactly four bytes of extras: the flags.
    assert.equal(extras.length, 4);
    assert.equal(extras.readUInt32BE(0), flags);
  }
});

test('add and replace', async () => {
  const k = key('ar');
  assert.equal(await client.replace(k, 'x'), false);
  assert.equal(await client.add(k, 'one'), true);
  assert.equal(await client.add(k, 'two'), false);
  assert.equal((await client.get(k)).value.toString(), 'one');
  assert.equal(await client.replace(k, 'three'), true);
  assert.equal((await client.get(k)).value.toString(), 'three');
});

test('append and prepend', async () => {
  const k = key('ap');
  // On a missing key memcached answers "Not stored." (status 5), which memjs
  // turns into an error naming that status.
  await assert.rejects(client.append(k, 'x'), /Item not stored/);
  assert.equal(await client.set(k, 'mid'), true);
  assert.equal(await client.append(k, '>'), true);
  // memjs 1.3.2's prepend() sends the APPEND opcode (a memjs bug), so
  // prepend (0x0f) goes through a hand-built request.
  const pre = await raw(0x0f, k, { value: Buffer.from('<') });
  assert.equal(pre.header.status, 0);
  assert.equal((await client.get(k)).value.toString(), '<mid>');
  const miss = await raw(0x0f, key('nopre'), { value: Buffer.from('<') });
  assert.equal(miss.header.status, 5);
  assert.equal(miss.val.toString(), 'Not stored.');
});

test('delete', async () => {
  const k = key('d');
  assert.equal(await client.delete(k), false);
  await client.set(k, 'v');
  assert.equal(await client.delete(k), true);
  assert.equal((await client.get(k)).value, null);
});

test('increment and decrement, with the binary initial value', async () => {
  const k = key('n');
  // A miss creates the counter with the initial value (not initial + delta).
  assert.deepEqual(await client.increment(k, 5, { initial: 10 }), { success: true, value: 10 });
  assert.deepEqual(await client.increment(k, 5, {}), { success: true, value: 15 });
  assert.equal((await client.get(k)).value.toString(), '15');
  assert.deepEqual(await client.decrement(k, 100, {}), { success: true, value: 0 });
  // Decrement never goes below zero; the value shrinks in place, space padded.
  assert.equal((await client.get(k)).value.toString(), '0 ');
  await client.set(k, 'abc');
  await assert.rejects(client.increment(k, 1, {}), /Incr\/Decr on non-numeric value/);
  // Expiration 0xffffffff means "do not create": a miss is "Key not found".
  const extras = Buffer.alloc(20);
  extras.writeUInt32BE(1, 4);
  extras.writeUInt32BE(0xffffffff, 16);
  const res = await raw(0x05, key('nocreate'), { extras });
  assert.equal(res.header.status, 1);
  assert.equal(res.val.toString(), 'Not found');
});

test('incr wraps at 2^64 (full 64-bit result in the reply)', async () => {
  const k = key('wrap');
  await client.set(k, '18446744073709551615');
  const extras = Buffer.alloc(20);
  extras.writeUInt32BE(2, 4);
  const res = await raw(0x05, k, { extras });
  assert.equal(res.header.status, 0);
  assert.equal(res.val.length, 8);
  assert.equal(res.val.readBigUInt64BE(0), 1n);
});

test('cas through the header', async () => {
  const k = key('cas');
  await client.set(k, 'one');
  const got = await raw(0x00, k);
  assert.equal(got.header.status, 0);
  assert.equal(got.val.toString(), 'one');
  const cas = got.header.cas;
  assert.notDeepEqual(cas, Buffer.alloc(8));
  const setExtras = Buffer.alloc(8);
  // Right cas: stored, and the item gets a new cas.
  const ok = await raw(0x01, k, { extras: setExtras, value: Buffer.from('two'), cas });
  assert.equal(ok.header.status, 0);
  assert.notDeepEqual(ok.header.cas, cas);
  // Stale cas: "Data exists for key." (status 2), value unchanged.
  const stale = await raw(0x01, k, { extras: setExtras, value: Buffer.from('three'), cas });
  assert.equal(stale.header.status, 2);
  assert.equal(stale.val.toString(), 'Data exists for key.');
  assert.equal((await client.get(k)).value.toString(), 'two');
  // A cas on a missing key is "Not found".
  const missing = await raw(0x01, key('nocas'), { extras: setExtras, value: Buffer.from('x'), cas });
  assert.equal(missing.header.status, 1);
});

test('getk returns the key; version answers', async () => {
  const k = key('gk');
  await client.set(k, 'v');
  const res = await raw(0x0c, k);
  assert.equal(res.header.status, 0);
  assert.equal(res.key.toString(), k);
  assert.equal(res.val.toString(), 'v');
  const version = await raw(0x0b, '');
  assert.equal(version.header.status, 0);
  assert.match(version.val.toString(), /^\d+\.\d+\.\d+/);
});

test('touch and expiry', async () => {
  const touched = key('tt');
  const untouched = key('tu');
  assert.equal(await client.touch(touched, 10), false);
  await client.set(touched, 't', { expires: 2 });
  await client.set(untouched, 'u', { expires: 2 });
  assert.equal(await client.touch(touched, 100), true);
  // The server clock ticks once a second, so a 2 s ttl lasts between 1 and
  // 2 s: long enough that the touch cannot race the expiry, gone by 3.5 s.
  await new Promise((r) => setTimeout(r, 3500));
  assert.equal((await client.get(untouched)).value, null);
  assert.equal((await client.get(touched)).value.toString(), 't');
});

test('large values', async () => {
  const k = key('big');
  const big = Buffer.alloc(1000000, 'q');
  assert.equal(await client.set(k, big), true);
  assert.deepEqual((await client.get(k)).value, big);
  await assert.rejects(client.set(k, Buffer.alloc(2000000, 'z')), /Value too large/);
  // memcached drops the old item when a set is refused as too large.
  assert.equal((await client.get(k)).value, null);
});

test('stats', async () => {
  const stats = () =>
    new Promise((resolve, reject) => {
      client.stats((err, server, s) => (err ? reject(err) : resolve(s)));
    });
  const before = await stats();
  assert.ok(Number(before.pid) > 0);
  assert.ok(before.version.length > 0);
  const k = key('s');
  await client.set(k, 'v');
  await client.get(k);
  const after = await stats();
  assert.equal(Number(after.cmd_set), Number(before.cmd_set) + 1);
  assert.equal(Number(after.get_hits), Number(before.get_hits) + 1);
});

test('flush', async () => {
  const k = key('fl');
  await client.set(k, 'v');
  const results = await client.flush();
  assert.deepEqual(results, { [`${HOST}:${PORT}`]: true });
  assert.equal((await client.get(k)).value, null);
  assert.equal(await client.set(k, 'after'), true);
  assert.equal((await client.get(k)).value.toString(), 'after');
});
