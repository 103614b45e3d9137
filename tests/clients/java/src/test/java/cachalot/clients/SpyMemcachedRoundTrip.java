// Round trips through spymemcached, the classic Java memcached client.
//
// The same tests run twice, once per protocol (TextProtocolTest and
// BinaryProtocolTest choose the connection factory), against the server named
// by the mc.host / mc.port system properties: cachalot, or memcached 1.6 when
// scripts/conformance.sh runs with TARGET_SERVER=memcached (these were
// written against memcached 1.6.18 first).  Every test checks the values and
// statuses that come back, not only that no exception was thrown.

package cachalot.clients;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.Serializable;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import net.spy.memcached.CASResponse;
import net.spy.memcached.CASValue;
import net.spy.memcached.ConnectionFactoryBuilder;
import net.spy.memcached.ConnectionFactoryBuilder.Protocol;
import net.spy.memcached.MemcachedClient;
import net.spy.memcached.internal.OperationFuture;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

@TestInstance(TestInstance.Lifecycle.PER_CLASS)
abstract class SpyMemcachedRoundTrip {
  /** Which protocol the subclass tests. */
  abstract Protocol protocol();

  MemcachedClient mc;
  InetSocketAddress addr;

  @BeforeAll
  void connect() throws IOException {
    String host = System.getProperty("mc.host", "127.0.0.1");
    String port = System.getProperty("mc.port", "");
    if (port.isEmpty()) {
      // Never guess a port: the run must hit the server the script started.
      throw new IllegalStateException("mc.port is not set: run via scripts/conformance.sh");
    }
    addr = new InetSocketAddress(host, Integer.parseInt(port));
    mc =
        new MemcachedClient(
            new ConnectionFactoryBuilder()
                .setProtocol(protocol())
                .setOpTimeout(5000)
                .setDaemon(true)
                .build(),
            List.of(addr));
  }

  @AfterAll
  void disconnect() {
    if (mc != null) {
      mc.shutdown(5, TimeUnit.SECONDS);
    }
  }

  /** A key no other test (or earlier run) uses. */
  String key(String name) {
    return "java_" + protocol() + "_" + UUID.randomUUID().toString().substring(0, 8) + "_" + name;
  }

  boolean binary() {
    return protocol() == Protocol.BINARY;
  }

  @Test
  void setGetOverwriteMissing() throws Exception {
    String k = key("a");
    assertNull(mc.get(k));
    assertTrue(mc.set(k, 0, "hello").get());
    assertEquals("hello", mc.get(k));
    assertTrue(mc.set(k, 0, "").get());
    assertEquals("", mc.get(k));
    assertTrue(mc.set(k, 0, "h\u00e9llo w\u00f6rld \u20ac").get());
    assertEquals("h\u00e9llo w\u00f6rld \u20ac", mc.get(k));
  }

  record Point(int x, String label) implements Serializable {}

  @Test
  void javaTypesRoundTripThroughFlags() throws Exception {
    // spymemcached's transcoder records the Java type in the item flags, so
    // these only come back as the right type if the flags round trip.
    Map<String, Object> values = new HashMap<>();
    values.put(key("int"), 42);
    values.put(key("long"), 1L << 40);
    values.put(key("bool"), true);
    values.put(key("double"), 3.25d);
    values.put(key("bytes"), new byte[] {0, 1, 2, (byte) 0xff, '\r', '\n'});
    values.put(key("obj"), new Point(7, "seven"));
    for (Map.Entry<String, Object> e : values.entrySet()) {
      assertTrue(mc.set(e.getKey(), 0, e.getValue()).get(), e.getKey());
    }
    for (Map.Entry<String, Object> e : values.entrySet()) {
      Object got = mc.get(e.getKey());
      if (e.getValue() instanceof byte[] bytes) {
        assertArrayEquals(bytes, (byte[]) got);
      } else {
        assertEquals(e.getValue(), got);
        assertEquals(e.getValue().getClass(), got.getClass());
      }
    }
  }

  @Test
  void getBulk() throws Exception {
    Map<String, Object> values = new HashMap<>();
    for (int i = 0; i < 30; i++) {
      values.put(key("m" + i), "v" + i);
    }
    for (Map.Entry<String, Object> e : values.entrySet()) {
      mc.set(e.getKey(), 0, e.getValue());
    }
    List<String> keys = new ArrayList<>(values.keySet());
    keys.add(key("missing"));
    assertEquals(values, mc.getBulk(keys));
  }

  @Test
  void addReplace() throws Exception {
    String k = key("ar");
    assertFalse(mc.replace(k, 0, "x").get());
    assertNull(mc.get(k));
    assertTrue(mc.add(k, 0, "one").get());
    OperationFuture<Boolean> second = mc.add(k, 0, "two");
    assertFalse(second.get());
    // The server's own words for the refusal.
    assertEquals(binary() ? "Data exists for key." : "NOT_STORED", second.getStatus().getMessage());
    assertEquals("one", mc.get(k));
    assertTrue(mc.replace(k, 0, "three").get());
    assertEquals("three", mc.get(k));
  }

  @Test
  void appendPrepend() throws Exception {
    String k = key("ap");
    assertFalse(mc.append(k, "x").get());
    assertFalse(mc.prepend(k, "x").get());
    assertTrue(mc.set(k, 0, "mid").get());
    assertTrue(mc.append(k, ">").get());
    assertTrue(mc.prepend(k, "<").get());
    assertEquals("<mid>", mc.get(k));
  }

  @Test
  void delete() throws Exception {
    String k = key("d");
    assertFalse(mc.delete(k).get());
    mc.set(k, 0, "v").get();
    assertTrue(mc.delete(k).get());
    assertNull(mc.get(k));
  }

  @Test
  void incrDecr() throws Exception {
    String k = key("n");
    // -1 means "not found" in spymemcached's incr/decr.
    assertEquals(-1, mc.incr(k, 1));
    assertEquals(-1, mc.decr(k, 1));
    // With a default the counter is created (binary: initial value in the
    // request; text: spymemcached follows up with add).
    assertEquals(10, mc.incr(k, 5, 10));
    assertEquals(15, mc.incr(k, 5));
    assertEquals(0, mc.decr(k, 100));
    String c = key("c");
    assertTrue(mc.set(c, 0, "1000").get());
    assertEquals(1001, mc.incr(c, 1));
    assertEquals(1, mc.decr(c, 1000));
    // Counters are stored as decimal text; read back raw, the shrunk value is
    // padded in place with spaces exactly as memcached does.
    assertEquals("1   ", mc.get(c));
    assertTrue(mc.set(c, 0, "18446744073709551615").get());
    assertEquals(0, mc.incr(c, 1));
  }

  @Test
  void getsCas() throws Exception {
    String k = key("cas");
    mc.set(k, 0, "one").get();
    CASValue<Object> v = mc.gets(k);
    assertEquals("one", v.getValue());
    assertEquals(CASResponse.OK, mc.cas(k, v.getCas(), "two"));
    assertEquals("two", mc.get(k));
    assertEquals(CASResponse.EXISTS, mc.cas(k, v.getCas(), "three"));
    assertEquals("two", mc.get(k));
    CASValue<Object> v2 = mc.gets(k);
    assertNotEquals(v.getCas(), v2.getCas());
    assertEquals(CASResponse.NOT_FOUND, mc.cas(key("nokey"), v2.getCas(), "x"));
    assertNull(mc.gets(key("nokey")));
  }

  @Test
  void touchGetAndTouchExpiry() throws Exception {
    String touched = key("tt");
    String untouched = key("tu");
    String gat = key("gat");
    assertFalse(mc.touch(touched, 10).get());
    mc.set(touched, 2, "t").get();
    mc.set(untouched, 2, "u").get();
    mc.set(gat, 2, "g").get();
    assertTrue(mc.touch(touched, 100).get());
    if (binary()) {
      // spymemcached has getAndTouch (GAT) in binary mode only; in text mode
      // it refuses it client-side, so the item is touched instead.
      CASValue<Object> g = mc.getAndTouch(gat, 100);
      assertEquals("g", g.getValue());
      assertNull(mc.getAndTouch(key("nogat"), 100));
    } else {
      assertTrue(mc.touch(gat, 100).get());
    }
    // The server clock ticks once a second, so a 2 s ttl lasts between 1 and
    // 2 s: long enough that the touch cannot race the expiry, gone by 3.5 s.
    Thread.sleep(3500);
    assertNull(mc.get(untouched));
    assertEquals("t", mc.get(touched));
    assertEquals("g", mc.get(gat));
  }

  @Test
  void largeValues() throws Exception {
    String k = key("big");
    // Random bytes: spymemcached gzips values over 16 KiB but keeps the
    // original when that does not shrink them, so these travel as they are.
    byte[] big = new byte[1_000_000];
    new Random(42).nextBytes(big);
    assertTrue(mc.set(k, 0, big).get());
    assertArrayEquals(big, (byte[]) mc.get(k));
    byte[] tooBig = new byte[2_000_000];
    new Random(7).nextBytes(tooBig);
    OperationFuture<Boolean> refused = mc.set(k, 0, tooBig);
    if (binary()) {
      // Binary: status 3 with memcached's message text.
      assertFalse(refused.get());
      assertEquals("Too large.", refused.getStatus().getMessage());
    } else {
      // Text: spymemcached raises SERVER_ERROR lines as exceptions (and then
      // reconnects), carrying the server's line verbatim.
      ExecutionException e = assertThrows(ExecutionException.class, refused::get);
      assertTrue(
          e.getMessage().endsWith("SERVER_ERROR object too large for cache"), e.getMessage());
    }
    // A refused set also drops the old item, as memcached does.
    assertNull(mc.get(k));
    // The connection is still in step afterwards.
    assertTrue(mc.set(k, 0, "small").get());
    assertEquals("small", mc.get(k));
  }

  @Test
  void statsAndVersions() throws Exception {
    Map<String, String> before = mc.getStats().get(addr);
    assertTrue(Long.parseLong(before.get("pid")) > 0);
    String k = key("s");
    mc.set(k, 0, "v").get();
    mc.get(k);
    Map<String, String> after = mc.getStats().get(addr);
    assertEquals(Long.parseLong(before.get("cmd_set")) + 1, Long.parseLong(after.get("cmd_set")));
    assertEquals(
        Long.parseLong(before.get("get_hits")) + 1, Long.parseLong(after.get("get_hits")));
    Map<String, String> settings = mc.getStats("settings").get(addr);
    assertEquals("1048576", settings.get("item_size_max"));
    String version = mc.getVersions().get(addr);
    assertEquals(before.get("version"), version);
  }

  @Test
  void flush() throws Exception {
    String k = key("fl");
    mc.set(k, 0, "v").get();
    assertTrue(mc.flush().get());
    assertNull(mc.get(k));
    assertTrue(mc.set(k, 0, "after").get());
    assertEquals("after", mc.get(k));
  }
}
