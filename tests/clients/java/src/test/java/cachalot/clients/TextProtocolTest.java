// spymemcached round trips over the text (ASCII) protocol; the tests
// themselves are in SpyMemcachedRoundTrip.

package cachalot.clients;

import net.spy.memcached.ConnectionFactoryBuilder.Protocol;

class TextProtocolTest extends SpyMemcachedRoundTrip {
  @Override
  Protocol protocol() {
    return Protocol.TEXT;
  }
}
